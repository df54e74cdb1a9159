// Copyright horovod_cpp authors. Errors of the training API: local misuse, names that differ
// across ranks, and timed-out waits.
//
// Timed-out waits with a stalled peer: rank 1 submits its collectives only after every other rank's wait has timed out and the other ranks
// have destroyed the optimizer, the parameters and every buffer they own. The collectives then
// complete into memory the library kept (parked): nothing in flight is freed. Run under
// AddressSanitizer too (scripts/run_sanitizers.sh), where a write into freed memory fails the
// job. Every rank checks the values it can see: rank 1 gets the right result, which the other
// ranks' kept buffers fed, and the next collective works everywhere.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "horovod_cpp/horovod_cpp.h"
#include "horovod_cpp/training.h"
#include "stalled_peer.h"

namespace {

using stalled_peer::check_next_collective_works;
using stalled_peer::check_parking_drains;
using stalled_peer::kLate;
using stalled_peer::kLong;
using stalled_peer::kShort;
using stalled_peer::kStalled;
using stalled_peer::require_timeout;

using hvd::GradKind;
using hvd::ParameterList;

hvd::DistributedOptions dist_opts() {
  hvd::DistributedOptions o;
  o.timeout = kLong;
  return o;
}

struct Session {
  Session() { hvd::init(); }
  ~Session() { hvd::shutdown(); }
};

// One step of a DistributedOptimizer over two dense parameters whose gradient is rank + 1 on
// each rank; rank 1 steps late, the others time out and destroy everything.
void stalled_step(hvd::Compression compression, const std::string& prefix) {
  const int n = hvd::size();
  const float average = static_cast<float>(n + 1) / 2.0f;
  {
    hvd::ParameterList params{hvd::make_parameter("w", {64, 33}), hvd::make_parameter("b", {33})};
    auto sgd = std::make_shared<hvd::SGD>(params, hvd::SGDOptions{});
    hvd::DistributedOptions o;
    o.compression = compression;
    o.name_prefix = prefix;
    o.timeout = hvd::rank() == kStalled ? kLong : kShort;
    hvd::DistributedOptimizer opt(sgd, o);
    for (auto& p : params) p->add_dense_grad(std::vector<float>(static_cast<size_t>(p->numel()), hvd::rank() + 1.0f));
    if (hvd::rank() == kStalled) std::this_thread::sleep_for(kLate);
    for (auto& p : params) opt.mark_ready(*p);
    if (hvd::rank() == kStalled) {
      opt.synchronize();
      for (auto& p : params) {
        for (float g : p->dense_grad()) REQUIRE(g == average);
      }
    } else {
      // The error names the collective still pending.
      require_timeout([&] { opt.step(); }, "'" + prefix + ".");
      REQUIRE(opt.steps_taken() == 0);
    }
  }  // optimizer, SGD and parameters destroyed here, on every rank
  check_next_collective_works(prefix + ".after");
  check_parking_drains();
}

}  // namespace

TEST_CASE("timed-out step() with a stalled peer frees nothing in flight", "[training][timeout]") {
  Session session;
  stalled_step(hvd::Compression::kNone, "timeout.dense");
}

TEST_CASE("timed-out step() with fp16 compression keeps the fp16 copies alive", "[training][timeout]") {
  Session session;
  stalled_step(hvd::Compression::kFP16, "timeout.fp16");
}

TEST_CASE("timed-out cross-rank check with a stalled peer frees nothing in flight", "[training][timeout]") {
  Session session;
  {
    // Long enough that the allgathered lists are heap buffers, not small strings.
    std::vector<std::pair<std::string, std::string>> entries;
    for (int i = 0; i < 40; ++i) entries.emplace_back("layer" + std::to_string(i) + ".weight", "shape [64,33]");
    if (hvd::rank() == kStalled) {
      std::this_thread::sleep_for(kLate);
      // Compares against what the other ranks sent before their wait timed out: passes only if
      // their kept buffers still held their lists when the allgather read them.
      hvd::check_consistent_across_ranks(entries, "timeout.check", "entry", kLong);
    } else {
      require_timeout([&] { hvd::check_consistent_across_ranks(entries, "timeout.check", "entry", kShort); },
                      "'hvd.training.check.");
    }
  }
  check_next_collective_works("timeout.check.after");
  check_parking_drains();
}

TEST_CASE("parameter names: duplicates and cross-rank mismatches fail clearly on every rank", "[training][errors]") {
  Session s;
  const int r = hvd::rank();
  // A name that differs on the last rank.
  {
    auto a = hvd::make_parameter("fc.weight", {2, 2});
    auto b = hvd::make_parameter(r == hvd::size() - 1 ? "fc.bias_typo" : "fc.bias", {2});
    std::string msg;
    try {
      hvd::DistributedOptimizer opt(std::make_shared<hvd::SGD>(ParameterList{a, b}), dist_opts());
    } catch (const hvd::MismatchError& e) {
      msg = e.what();
    }
    INFO(msg);
    CHECK(msg.find("fc.bias") != std::string::npos);
    CHECK(msg.find("rank " + std::to_string(hvd::size() - 1)) != std::string::npos);
  }
  // A shape that differs.
  {
    auto a = hvd::make_parameter("w", {2, r == 0 ? 3 : 4});
    std::string msg;
    try {
      hvd::broadcast_parameters({a}, 0, kLong);
    } catch (const hvd::MismatchError& e) {
      msg = e.what();
    }
    INFO(msg);
    CHECK(msg.find("'w'") != std::string::npos);
    CHECK(msg.find("[2,3]") != std::string::npos);
  }
  // Duplicates on one rank only: still reported on every rank.
  {
    auto a = hvd::make_parameter("dup", {2});
    auto b = hvd::make_parameter(r == 0 ? "dup" : "other", {2});
    std::string msg;
    try {
      hvd::DistributedOptimizer opt(std::make_shared<hvd::SGD>(ParameterList{a, b}), dist_opts());
    } catch (const hvd::InvalidArgumentError& e) {
      msg = e.what();
    }
    INFO(msg);
    CHECK(msg.find("'dup' is used more than once on rank 0") != std::string::npos);
  }
  // Dense on one rank, sparse on another.
  {
    auto a = hvd::make_parameter("emb", {4, 2}, {}, r == 0 ? GradKind::kSparse : GradKind::kDense);
    CHECK_THROWS_AS(hvd::DistributedOptimizer(std::make_shared<hvd::SGD>(ParameterList{a}), dist_opts()),
                    hvd::MismatchError);
  }
  // The runtime is still usable afterwards.
  std::vector<float> x{1.0f};
  hvd::allreduce("after.errors", hvd::TensorView(x.data(), hvd::DataType::kFloat32, {1}),
                 hvd::AllreduceOptions{hvd::ReduceOp::kSum});
  CHECK(x[0] == Approx(static_cast<float>(hvd::size())));
}

TEST_CASE("local misuse is rejected", "[training][errors]") {
  CHECK_THROWS_AS(hvd::Parameter("p", {}), hvd::InvalidArgumentError);
  CHECK_THROWS_AS(hvd::Parameter("p", {2}, {1.0f}), hvd::InvalidArgumentError);
  hvd::Parameter dense("d", {3, 2});
  CHECK_THROWS_AS(dense.add_sparse_grad({0}, {1.0f, 2.0f}), hvd::InvalidArgumentError);
  hvd::Parameter sp("s", {3, 2}, {}, GradKind::kSparse);
  CHECK_THROWS_AS(sp.add_sparse_grad({3}, {1.0f, 2.0f}), hvd::InvalidArgumentError);
  CHECK_THROWS_AS(sp.add_sparse_grad({0}, {1.0f}), hvd::InvalidArgumentError);
  sp.add_sparse_grad({1, 1}, {1.0f, 2.0f, 3.0f, 4.0f});
  CHECK(sp.grad_as_dense() == std::vector<float>{0, 0, 4, 6, 0, 0});
}
