// Copyright horovod_cpp authors. The background loop in one process (as test_loop.cc):
// stalls and shutdowns, and submissions of one tensor as the API makes them.
#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "common/fatal.h"
#include "core/handle_state.h"
#include "in_process_data_plane.h"
#include "loop_support.h"

using namespace hvd;
using namespace hvd::testing;

TEST_CASE("loop: a stalled tensor shuts the set down and its handle says why", "[loop]") {
  Config cfg = test_config();
  cfg.stall_check_seconds = 0.2;
  cfg.stall_shutdown_seconds = 0.5;
  const int n = 2;
  InProcessSets sets(n, cfg);
  std::vector<float> b(4, 1.0f);
  Status s = finish(submit(sets.set(0), entry(0, OpType::kAllreduce, "lonely", b.data(),
                                              DataType::kFloat32, {4}, nullptr)));
  CHECK(s.code() == ErrorCode::kShutdown);
  CHECK(s.message().find("lonely") != std::string::npos);
  INFO(s.message());
  CHECK(s.message().find("1") != std::string::npos);  // names the missing rank
  sets.shutdown();
  CHECK_FALSE(sets.set(1).running());
  CHECK_FALSE(sets.set(0).running());
  // The stall was reported as fatal (common/fatal.h): that ends a real job after the grace
  // period. This simulated job is over; clear it so the rest of this process runs on.
  CHECK_THAT(pending_fatal(), Catch::Contains("lonely"));
  clear_fatal();
}

TEST_CASE("loop: one rank's shutdown fails every rank's pending work with a ShutdownError", "[loop]") {
  const int n = GENERATE(2, 3);
  InProcessSets sets(n, test_config());
  std::vector<float> b(4, 1.0f);
  auto h = submit(sets.set(0), entry(0, OpType::kAllreduce, "never", b.data(), DataType::kFloat32, {4}, nullptr));
  sets.set(n - 1).request_shutdown();
  Status s = finish(h);
  CHECK(s.code() == ErrorCode::kShutdown);
  INFO(s.message());
  CHECK(s.message().find("'never'") != std::string::npos);
  // A stopped set refuses new work at once.
  std::vector<float> c(4, 1.0f);
  sets.shutdown();
  std::vector<Entry> v;
  v.push_back(entry(0, OpType::kAllreduce, "later", c.data(), DataType::kFloat32, {4},
                    std::make_shared<detail::HandleState>("later", 1)));
  CHECK(enqueue(sets.set(0), v).code() == ErrorCode::kShutdown);
}

TEST_CASE("loop: one-tensor submissions as the API makes them mix with entries", "[loop]") {
  // Each step, every rank submits six tensors: even ones as the API submits one tensor
  // (submit_one(): in place, or out of place into a second buffer), odd ones as test entries
  // through enqueue(), in an order
  // that differs by rank, so both kinds share cycles and fused batches. Every element of
  // every result is checked against the sum (or average) of the ranks' values.
  const int n = GENERATE(2, 3);
  InProcessSets sets(n, test_config());
  constexpr int kTensors = 6, kLen = 9, kSteps = 4;
  const std::string err = on_ranks(n, [&](int rank) {
    std::vector<std::vector<float>> in(kTensors, std::vector<float>(kLen));
    std::vector<std::vector<float>> out(kTensors, std::vector<float>(kLen, -1.0f));
    for (int step = 0; step < kSteps; ++step) {
      std::vector<std::shared_ptr<detail::HandleState>> hs(kTensors);
      for (int k = 0; k < kTensors; ++k) {
        const int t = (k + rank) % kTensors;
        auto& b = in[static_cast<size_t>(t)];
        for (int i = 0; i < kLen; ++i) b[static_cast<size_t>(i)] = value(rank, t, i) + step;
        const std::string name = "mixed." + std::to_string(t);
        if (t % 2 == 1) {
          hs[static_cast<size_t>(t)] = submit(
              sets.set(rank),
              entry(rank, OpType::kAllreduce, name, b.data(), DataType::kFloat32, {kLen}, nullptr));
        } else {
          const bool separate = t % 4 == 0;
          hs[static_cast<size_t>(t)] =
              submit_one(sets.set(rank), name, b.data(), kLen,
                         separate ? out[static_cast<size_t>(t)].data() : nullptr,
                         t == 2 ? ReduceOp::kAverage : ReduceOp::kSum);
        }
      }
      for (int t = 0; t < kTensors; ++t) {
        require_ok(hs[static_cast<size_t>(t)]);
        const bool separate = t % 2 == 0 && t % 4 == 0;
        const auto& got = separate ? out[static_cast<size_t>(t)] : in[static_cast<size_t>(t)];
        check_all("step " + std::to_string(step) + " mixed." + std::to_string(t), got.data(), kLen,
                  [&](int64_t i) {
                    float s = 0;
                    for (int r = 0; r < n; ++r) s += value(r, t, static_cast<int>(i)) + step;
                    return t == 2 ? s / static_cast<float>(n) : s;
                  });
        if (separate) {  // out of place: the input is left as it was
          check_all("input of mixed." + std::to_string(t), in[static_cast<size_t>(t)].data(), kLen,
                    [&](int64_t i) { return value(rank, t, static_cast<int>(i)) + step; });
        }
      }
    }
  });
  INFO(err);
  CHECK(err.empty());
}

TEST_CASE("loop: a one-tensor submission is refused for a pending name and a stopped set, taking nothing", "[loop]") {
  InProcessSets sets(2, test_config());
  std::vector<float> a0(4, 1.0f), a1(4, 2.0f), b0(4, 9.0f);
  auto h0 = submit_one(sets.set(0), "x", a0.data(), 4);
  // Rank 1 has not submitted "x": a second "x" on rank 0 is refused, and the caller keeps
  // its view (shape included) and its handle.
  const std::string x = "x";
  TensorView again(b0.data(), DataType::kFloat32, {4});
  auto h_again = std::make_shared<detail::HandleState>("x", 1);
  TensorSubmit t(OpType::kAllreduce, &x, &again, nullptr);
  SubmitCommon c;
  c.handle = h_again;
  Status s = sets.set(0).enqueue(&t, 1, c);
  CHECK(s.code() == ErrorCode::kInvalidArgument);
  CHECK(s.message().find("'x'") != std::string::npos);
  CHECK(s.message().find("still pending") != std::string::npos);
  CHECK(again.data == b0.data());
  CHECK(again.shape == Shape{4});
  CHECK(c.handle == h_again);
  auto h1 = submit_one(sets.set(1), "x", a1.data(), 4);
  require_pending_ran_refused_not(h0, h1, a0, a1, b0);
  sets.shutdown();
  TensorSubmit late(OpType::kAllreduce, &x, &again, nullptr);
  s = sets.set(0).enqueue(&late, 1, c);
  CHECK(s.code() == ErrorCode::kShutdown);
  CHECK(s.message().find("allreduce 'x' rejected") != std::string::npos);
  CHECK(again.shape == Shape{4});
}
