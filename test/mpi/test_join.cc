// Copyright horovod_cpp authors. join() for ranks with uneven numbers of steps.
#include <thread>

#include "test_util.h"

using hvd::DataType;
using hvd::ReduceOp;
using namespace hvdtest;

TEST_CASE("join: uneven steps; joined ranks contribute zeros; returns the last rank", "[join]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank();
  // Rank r runs r + 2 steps (the last rank runs the most), with cached names after step 1.
  const int my_steps = me + 2;
  for (int step = 0; step < my_steps; ++step) {
    std::vector<float> g(10, static_cast<float>(me + 1));
    hvd::AllreduceOptions o;  // average: divides by the full size even when ranks have joined
    wait_ok(hvd::allreduce_async("join.grad", hvd::TensorView(g.data(), DataType::kFloat32, {10}), o));
    double sum = 0;
    for (int r = 0; r < n; ++r) sum += (step < r + 2) ? r + 1 : 0;  // joined ranks gave zeros
    int bad = 0;
    for (float v : g) bad += std::fabs(v - sum / n) > 1e-5;
    CHECK(bad == 0);
  }
  const int last = hvd::join();
  CHECK(last == n - 1);
  // Afterwards everything works normally again, cache included.
  for (int k = 0; k < 2; ++k) {
    float x = 1.0f;
    hvd::AllreduceOptions sum;
    sum.op = ReduceOp::kSum;
    wait_ok(hvd::allreduce_async("join.after", hvd::TensorView(&x, DataType::kFloat32, {1}), sum));
    CHECK(x == static_cast<float>(n));
  }
}

TEST_CASE("join: other collectives fail on every rank while a rank has joined", "[join][errors]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank();
  if (me == 0) {
    CHECK(hvd::join() == n - 1);
  } else {
    std::vector<float> v(4, 1.0f);
    try {
      hvd::allgather("join.gather", hvd::TensorView(v.data(), DataType::kFloat32, {4}));
      FAIL_CHECK("allgather with a joined rank succeeded");
    } catch (const hvd::MismatchError& e) {
      const std::string m = e.what();
      INFO(m);
      CHECK(m.find("'join.gather'") != std::string::npos);
      CHECK(m.find("rank 0 joined") != std::string::npos);
    }
    try {
      hvd::broadcast("join.bcast", hvd::TensorView(v.data(), DataType::kFloat32, {4}), 1);
      FAIL_CHECK("broadcast with a joined rank succeeded");
    } catch (const hvd::MismatchError& e) {
      CHECK(std::string(e.what()).find("joined") != std::string::npos);
    }
    // An allreduce still works, with rank 0's zeros.
    hvd::AllreduceOptions sum;
    sum.op = ReduceOp::kSum;
    wait_ok(hvd::allreduce_async("join.sum", hvd::TensorView(v.data(), DataType::kFloat32, {4}), sum));
    CHECK(v[3] == static_cast<float>(n - 1));
    if (me == n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK(hvd::join() == n - 1);
  }
  float x = 2.0f;
  hvd::AllreduceOptions sum;
  sum.op = ReduceOp::kSum;
  wait_ok(hvd::allreduce_async("join.after2", hvd::TensorView(&x, DataType::kFloat32, {1}), sum));
  CHECK(x == 2.0f * n);
}
