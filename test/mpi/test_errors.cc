// Copyright horovod_cpp authors. Bad input under mpirun: every error reaches every rank with a
// message naming the tensor, the ranks and what differs, and the next collective works.
#include <thread>

#include "test_util.h"

using hvd::DataType;
using hvd::ReduceOp;
using namespace hvdtest;

namespace {

// Submits `submit` on every rank, expects a MismatchError containing every fragment, then
// checks that a following allreduce succeeds.
template <typename Submit>
void expect_mismatch(const std::string& name, Submit submit, std::vector<std::string> fragments) {
  hvd::Handle h = submit();
  std::string message;
  try {
    if (!h.wait_for(std::chrono::seconds(60))) FAIL_CHECK(name << ": no verdict within 60 s");
    FAIL_CHECK(name << ": succeeded but the ranks disagreed");
  } catch (const hvd::MismatchError& e) {
    message = e.what();
  } catch (const hvd::Error& e) {
    FAIL_CHECK(name << ": wrong error type: " << e.what());
  }
  fragments.push_back("'" + name + "'");
  for (const auto& f : fragments) {
    INFO("message: " << message);
    CHECK(message.find(f) != std::string::npos);
  }
  // The invariant: the next collective works.
  float x = 1.0f;
  hvd::AllreduceOptions o;
  o.op = ReduceOp::kSum;
  wait_ok(hvd::allreduce_async("after." + name, hvd::TensorView(&x, DataType::kFloat32, {1}), o));
  CHECK(x == static_cast<float>(hvd::size()));
}

}  // namespace

TEST_CASE("mismatch: shape, dtype, op, scale, root, collective, allgather dims", "[errors]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank(), last = n - 1;
  std::vector<float> buf(64, 1.0f);
  std::vector<double> dbuf(64, 1.0);

  expect_mismatch("fc.weight", [&] {
    const int64_t cols = me == last ? 6 : 5;
    return hvd::allreduce_async("fc.weight", hvd::TensorView(buf.data(), DataType::kFloat32, {4, cols}));
  }, {"allreduce", "rank " + std::to_string(last) + " sent float32[4,6]", "sent float32[4,5]"});

  expect_mismatch("dtype.t", [&] {
    if (me == last) return hvd::allreduce_async("dtype.t", hvd::TensorView(dbuf.data(), DataType::kFloat64, {8}));
    return hvd::allreduce_async("dtype.t", hvd::TensorView(buf.data(), DataType::kFloat32, {8}));
  }, {"float64[8]", "float32[8]", "rank " + std::to_string(last)});

  // The same bytes, told apart: uint16 is a dtype of its own, not int16's bits.
  expect_mismatch("u16.t", [&] {
    const DataType d = me == last ? DataType::kUInt16 : DataType::kInt16;
    return hvd::broadcast_async("u16.t", hvd::TensorView(buf.data(), d, {8}), 0);
  }, {"uint16[8]", "int16[8]", "rank " + std::to_string(last)});

  expect_mismatch("op.t", [&] {
    hvd::AllreduceOptions o;
    o.op = me == last ? ReduceOp::kMax : ReduceOp::kSum;
    return hvd::allreduce_async("op.t", hvd::TensorView(buf.data(), DataType::kFloat32, {8}), o);
  }, {"op max", "op sum", "rank " + std::to_string(last)});

  expect_mismatch("scale.t", [&] {
    hvd::AllreduceOptions o;
    o.prescale_factor = me == last ? 2.0 : 1.0;
    return hvd::allreduce_async("scale.t", hvd::TensorView(buf.data(), DataType::kFloat32, {8}), o);
  }, {"prescale_factor 2", "prescale_factor 1"});

  expect_mismatch("root.t", [&] {
    return hvd::broadcast_async("root.t", hvd::TensorView(buf.data(), DataType::kFloat32, {8}),
                                me == last ? 1 : 0);
  }, {"root 1", "root 0", "broadcast"});

  expect_mismatch("kind.t", [&] {
    if (me == last) return hvd::broadcast_async("kind.t", hvd::TensorView(buf.data(), DataType::kFloat32, {8}), 0);
    return hvd::allreduce_async("kind.t", hvd::TensorView(buf.data(), DataType::kFloat32, {8}));
  }, {"mismatched collective", "sent broadcast", "sent allreduce"});

  expect_mismatch("gather.t", [&] {
    const int64_t cols = me == last ? 3 : 2;
    return hvd::allgather_async("gather.t", hvd::TensorView(buf.data(), DataType::kFloat32, {2, cols}));
  }, {"allgather", "trailing dims [3]", "trailing dims [2]"});
}

TEST_CASE("mismatch after the tensor was cached", "[errors][cache]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank(), last = n - 1;
  std::vector<float> buf(64, 1.0f);
  for (int step = 0; step < 3; ++step) {
    wait_ok(hvd::allreduce_async("cached.w", hvd::TensorView(buf.data(), DataType::kFloat32, {4, 4})));
  }
  expect_mismatch("cached.w", [&] {
    const int64_t rows = me == last ? 5 : 4;
    return hvd::allreduce_async("cached.w", hvd::TensorView(buf.data(), DataType::kFloat32, {rows, 4}));
  }, {"float32[5,4]", "float32[4,4]", "rank " + std::to_string(last)});
  // And the name works again with agreeing shapes.
  for (int step = 0; step < 2; ++step) {
    std::fill(buf.begin(), buf.end(), 2.0f);
    hvd::AllreduceOptions o;
    o.op = ReduceOp::kSum;
    wait_ok(hvd::allreduce_async("cached.w", hvd::TensorView(buf.data(), DataType::kFloat32, {4, 4}), o));
    CHECK(buf[15] == 2.0f * n);
  }
}

TEST_CASE("duplicate name while pending: immediate error on that rank", "[errors]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank();
  float a = 1.0f, b = 1.0f;
  hvd::AllreduceOptions o;
  o.op = ReduceOp::kSum;
  // Rank 0 submits twice; the others submit once, late, so the first stays pending.
  if (me != 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  hvd::Handle first = hvd::allreduce_async("dup", hvd::TensorView(&a, DataType::kFloat32, {1}), o);
  if (me == 0) {
    try {
      hvd::allreduce_async("dup", hvd::TensorView(&b, DataType::kFloat32, {1}), o);
      FAIL_CHECK("second submission of 'dup' was accepted");
    } catch (const hvd::InvalidArgumentError& e) {
      const std::string m = e.what();
      CHECK(m.find("'dup'") != std::string::npos);
      CHECK(m.find("rank 0") != std::string::npos);
      CHECK(m.find("pending") != std::string::npos);
    }
  }
  wait_ok(first);
  CHECK(a == static_cast<float>(n));
}

TEST_CASE("local misuse is rejected at once", "[errors]") {
  Session s;
  uint8_t flags[4] = {1, 0, 1, 0};
  int32_t ints[4] = {1, 2, 3, 4};
  float f[4] = {1, 2, 3, 4};
  hvd::AllreduceOptions avg;
  CHECK_THROWS_AS(hvd::allreduce_async("bool.avg", hvd::TensorView(flags, DataType::kBool, {4}), avg),
                  hvd::InvalidArgumentError);
  hvd::AllreduceOptions scaled;
  scaled.op = ReduceOp::kSum;
  scaled.prescale_factor = 2.0;
  CHECK_THROWS_AS(hvd::allreduce_async("bool.scaled", hvd::TensorView(flags, DataType::kBool, {4}), scaled),
                  hvd::InvalidArgumentError);
  CHECK_THROWS_AS(hvd::broadcast_async("bad.root", hvd::TensorView(f, DataType::kFloat32, {4}), hvd::size()),
                  hvd::InvalidArgumentError);
  CHECK_THROWS_AS(hvd::allgather_async("scalar", hvd::TensorView(f, DataType::kFloat32, {})),
                  hvd::InvalidArgumentError);
  CHECK_THROWS_AS(hvd::allreduce_async("shape.out", hvd::TensorView(f, DataType::kFloat32, {4}),
                                       hvd::TensorView(f, DataType::kFloat32, {2, 2})),
                  hvd::InvalidArgumentError);
  CHECK_THROWS_AS(hvd::allreduce_async("null", hvd::TensorView(nullptr, DataType::kFloat32, {4})),
                  hvd::InvalidArgumentError);
  CHECK_THROWS_AS(hvd::grouped_allreduce_async({"g.a", "g.a"}, {hvd::TensorView(f, DataType::kFloat32, {2}),
                                                               hvd::TensorView(f + 2, DataType::kFloat32, {2})}),
                  hvd::InvalidArgumentError);
  CHECK_THROWS_AS(hvd::Handle().wait(), hvd::InvalidArgumentError);
  // Nothing was submitted, so the next collective works.
  float x = 1.0f;
  hvd::AllreduceOptions sum;
  sum.op = ReduceOp::kSum;
  wait_ok(hvd::allreduce_async("after.misuse", hvd::TensorView(&x, DataType::kFloat32, {1}), sum));
  CHECK(x == static_cast<float>(hvd::size()));
}

TEST_CASE("wait with a timeout on a pending operation", "[errors][async]") {
  Session s;
  const int me = hvd::rank();
  float x = 1.0f;
  if (me == 0) {
    hvd::Handle h = hvd::allreduce_async("slow", hvd::TensorView(&x, DataType::kFloat32, {1}));
    CHECK_THROWS_AS(h.wait(std::chrono::milliseconds(50)), hvd::TimeoutError);
    CHECK_FALSE(h.wait_for(std::chrono::milliseconds(10)));
    CHECK_FALSE(h.poll());
    hvd::barrier();  // lets the other ranks submit
    wait_ok(h);
  } else {
    hvd::barrier();
    wait_ok(hvd::allreduce_async("slow", hvd::TensorView(&x, DataType::kFloat32, {1})));
  }
  CHECK(x == 1.0f);
}

TEST_CASE("use before init and after shutdown", "[errors][lifecycle]") {
  CHECK_FALSE(hvd::is_initialized());
  CHECK_THROWS_AS(hvd::rank(), hvd::NotInitializedError);
  float x = 0;
  CHECK_THROWS_AS(hvd::allreduce("x", hvd::TensorView(&x, DataType::kFloat32, {1})),
                  hvd::NotInitializedError);
  hvd::init();
  CHECK(hvd::is_initialized());
  CHECK_THROWS_AS(hvd::init(), hvd::InvalidArgumentError);
  hvd::shutdown();
  hvd::shutdown();  // idempotent
  CHECK_FALSE(hvd::is_initialized());
  CHECK_THROWS_AS(hvd::size(), hvd::NotInitializedError);
  CHECK_THROWS_AS(hvd::barrier(), hvd::NotInitializedError);
  try {
    hvd::size();
  } catch (const hvd::NotInitializedError& e) {
    CHECK(std::string(e.what()).find("hvd::init()") != std::string::npos);
  }
}

TEST_CASE("shutdown with operations pending on other ranks", "[errors][lifecycle]") {
  hvd::init();
  const int n = hvd::size(), me = hvd::rank();
  const int quitter = n - 1;
  float x = 1.0f;
  if (me != quitter) {
    hvd::Handle h = hvd::allreduce_async("never", hvd::TensorView(&x, DataType::kFloat32, {1}));
    std::string message;
    try {
      h.wait(std::chrono::seconds(60));
      FAIL_CHECK("'never' completed");
    } catch (const hvd::ShutdownError& e) {
      message = e.what();
    } catch (const hvd::Error& e) {
      FAIL_CHECK("wrong error: " << e.what());
    }
    INFO(message);
    CHECK(message.find("'never'") != std::string::npos);
    CHECK(message.find("rank " + std::to_string(quitter) + " called shutdown()") != std::string::npos);
    // New operations fail at once.
    CHECK_THROWS_AS(hvd::allreduce_async("later", hvd::TensorView(&x, DataType::kFloat32, {1})),
                    hvd::ShutdownError);
    CHECK_FALSE(hvd::is_initialized());
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  hvd::shutdown();
  // A new session works.
  Session again;
  float y = 1.0f;
  hvd::AllreduceOptions sum;
  sum.op = ReduceOp::kSum;
  wait_ok(hvd::allreduce_async("again", hvd::TensorView(&y, DataType::kFloat32, {1}), sum));
  CHECK(y == static_cast<float>(n));
}

TEST_CASE("stall: logged, then the job shuts down and handles say why", "[errors][stall]") {
  for (bool cached : {false, true}) {
    // A long grace: this loaded test machine must not end the job before the re-init below.
    ScopedEnv env({{"HOROVOD_STALL_CHECK_TIME_SECONDS", "1"},
                   {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "2"},
                   {"HOROVOD_CPP_ABORT_GRACE_SECONDS", "120"}});
    hvd::init();
    const int n = hvd::size(), me = hvd::rank(), missing = n - 1;
    float x = 1.0f;
    if (cached) {  // make it a cached tensor first: the stall is then seen through bits
      for (int k = 0; k < 2; ++k) wait_ok(hvd::allreduce_async("stuck", hvd::TensorView(&x, DataType::kFloat32, {1})));
    }
    if (me != missing) {
      hvd::Handle h = hvd::allreduce_async("stuck", hvd::TensorView(&x, DataType::kFloat32, {1}));
      std::string message;
      try {
        h.wait(std::chrono::seconds(60));
        FAIL_CHECK("'stuck' completed");
      } catch (const hvd::ShutdownError& e) {
        message = e.what();
      } catch (const hvd::Error& e) {
        FAIL_CHECK("wrong error: " << e.what());
      }
      INFO(message);
      CHECK(message.find("'stuck'") != std::string::npos);
      CHECK(message.find("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS") != std::string::npos);
      CHECK(message.find("missing on rank " + std::to_string(missing)) != std::string::npos);
    } else {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (hvd::is_initialized() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      CHECK_FALSE(hvd::is_initialized());
    }
    hvd::shutdown();
  }
  // Every rank is still running: a new init() on all of them clears the fatal condition the
  // stall left (else the job would end at exit or after HOROVOD_CPP_ABORT_GRACE_SECONDS).
  Session again;
  float y = 1.0f;
  hvd::AllreduceOptions sum;
  sum.op = ReduceOp::kSum;
  wait_ok(hvd::allreduce_async("after.stall", hvd::TensorView(&y, DataType::kFloat32, {1}), sum));
  CHECK(y == static_cast<float>(hvd::size()));
}
