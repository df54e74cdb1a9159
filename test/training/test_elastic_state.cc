// Copyright horovod_cpp authors. Multi-rank tests of the elastic C++ API (horovod_cpp/elastic.h)
// that need no driver: TensorState's save/restore/sync, run()'s loop (a thrown InternalError
// restores and resets through shutdown() and init(), HostsUpdatedInterrupt keeps the state),
// and the primitives outside elastic mode. Every rank computes its expected values itself.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "horovod_cpp/elastic.h"
#include "horovod_cpp/horovod_cpp.h"
#include "horovod_cpp/training.h"

namespace {

struct Session {
  Session() { hvd::init(); }
  ~Session() { hvd::shutdown(); }
};

// What rank `r` starts with: parameter values, momentum buffers, learning rate, integers.
float param_value(int r, size_t i) {
  return static_cast<float>(r * 100 + static_cast<int>(i)) + 0.25f;
}
float momentum_value(int r, size_t i) {
  return static_cast<float>(r) + 0.5f + static_cast<float>(i);
}
double lr_of(int r) {
  return 0.01 * (r + 1);
}

struct Fixture {
  hvd::ParameterList params;
  std::shared_ptr<hvd::SGD> sgd;

  explicit Fixture(int r) {
    params = {hvd::make_parameter("w", {3, 4}), hvd::make_parameter("b", {3})};
    for (auto& p : params) {
      for (size_t i = 0; i < p->value().size(); ++i) p->value()[i] = param_value(r, i);
    }
    hvd::SGDOptions so;
    so.momentum = 0.9;
    so.lr = lr_of(r);
    sgd = std::make_shared<hvd::SGD>(params, so);
    for (auto& e : sgd->state()) {
      if (e.view.dtype != hvd::DataType::kFloat32) continue;
      auto* f = static_cast<float*>(e.view.data);
      for (int64_t i = 0; i < e.view.numel(); ++i) f[i] = momentum_value(r, static_cast<size_t>(i));
    }
  }

  // Every value as rank `r` set it (exact comparisons: nothing is computed).
  void check_is(int r, const char* when) const {
    INFO(when << ": expecting rank " << r << "'s values on rank " << hvd::rank());
    for (const auto& p : params) {
      for (size_t i = 0; i < p->value().size(); ++i) REQUIRE(p->value()[i] == param_value(r, i));
    }
    for (auto& e : sgd->state()) {
      if (e.view.dtype != hvd::DataType::kFloat32) continue;
      const auto* f = static_cast<const float*>(e.view.data);
      for (int64_t i = 0; i < e.view.numel(); ++i) {
        REQUIRE(f[i] == momentum_value(r, static_cast<size_t>(i)));
      }
    }
    REQUIRE(sgd->learning_rate() == lr_of(r));
  }

  void scribble() {
    for (auto& p : params) {
      for (float& v : p->value()) v = -7.0f;
    }
    for (auto& e : sgd->state()) {
      if (e.view.dtype != hvd::DataType::kFloat32) continue;
      auto* f = static_cast<float*>(e.view.data);
      for (int64_t i = 0; i < e.view.numel(); ++i) f[i] = -9.0f;
    }
    sgd->set_learning_rate(123.0);
  }
};

}  // namespace

TEST_CASE("elastic TensorState: restore returns to the last save, sync to rank 0's", "[elastic]") {
  Session s;
  const int r = hvd::rank();
  Fixture f(r);
  hvd::elastic::TensorState state(f.params, f.sgd, {{"epoch", 10 + r}, {"batch", 3}});
  f.scribble();
  state.set_value("epoch", 99);
  state.restore();  // the constructor saved
  f.check_is(r, "restore");
  REQUIRE(state.value("epoch") == 10 + r);

  state.sync();
  f.check_is(0, "sync");
  REQUIRE(state.value("epoch") == 10);
  REQUIRE(state.value("batch") == 3);
  f.scribble();
  state.set_value("batch", 50);
  state.restore();  // sync saved what it received
  f.check_is(0, "restore after sync");
  REQUIRE(state.value("batch") == 3);
  REQUIRE_THROWS_AS(state.value("nope"), hvd::InvalidArgumentError);
}

TEST_CASE("elastic primitives outside elastic mode: no updates, generation 0", "[elastic]") {
  Session s;
  for (int i = 0; i < 3; ++i) REQUIRE_FALSE(hvd::elastic::hosts_updated());
  REQUIRE(hvd::elastic::generation() == 0);
  Fixture f(hvd::rank());
  hvd::elastic::TensorState state(f.params, f.sgd, {{"epoch", 1}});
  state.set_value("epoch", 2);
  REQUIRE_NOTHROW(state.commit());  // saves; no HostsUpdatedInterrupt
  state.set_value("epoch", 5);
  state.restore();
  REQUIRE(state.value("epoch") == 2);
}

TEST_CASE("elastic run(): InternalError restores and resets, HostsUpdatedInterrupt keeps",
          "[elastic]") {
  Session s;
  const int r = hvd::rank();
  Fixture f(r);
  hvd::elastic::TensorState state(f.params, f.sgd, {{"step", 0}});
  int resets = 0, passes = 0;
  state.register_reset_callbacks([&] { ++resets; });
  std::vector<int64_t> seen;  // "step" at the start of each pass
  hvd::elastic::run(state, [&](hvd::elastic::State&) {
    seen.push_back(state.value("step"));
    REQUIRE(hvd::is_initialized());
    switch (passes++) {
      case 0:  // committed work, then uncommitted work, then a lost peer
        f.check_is(0, "first sync");
        state.set_value("step", 4);
        state.commit();
        f.scribble();
        state.set_value("step", 6);
        throw hvd::InternalError("test: a peer was lost");
      case 1:  // restored to the commit; new hosts at the next commit
        f.check_is(0, "after the restore");
        state.set_value("step", 8);
        state.save();
        throw hvd::elastic::HostsUpdatedInterrupt();
      default: {  // kept, and the runtime works after two resets
        std::vector<float> one{1.0f};
        hvd::allreduce("elastic.run.after",
                       hvd::TensorView(one.data(), hvd::DataType::kFloat32, {1}),
                       hvd::AllreduceOptions{hvd::ReduceOp::kSum});
        REQUIRE(one[0] == static_cast<float>(hvd::size()));
      }
    }
  });
  REQUIRE(passes == 3);
  REQUIRE(resets == 2);
  REQUIRE(seen == std::vector<int64_t>{0, 4, 8});
}
