// Copyright horovod_cpp authors. Errors that only one rank can see become errors on every
// rank (through the negotiation), and process sets added from several threads at once.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "test_util.h"

using hvd::DataType;
using hvd::ReduceOp;
using namespace hvdtest;

namespace {

// Waits for `h` and returns the error message ("" if it succeeded or timed out: both fail).
std::string error_of(const hvd::Handle& h) {
  try {
    if (!h.wait_for(std::chrono::duration_cast<std::chrono::milliseconds>(kDeadline))) {
      FAIL_CHECK("'" << h.name() << "' neither completed nor failed within the deadline");
      return "";
    }
    FAIL_CHECK("'" << h.name() << "' succeeded");
  } catch (const hvd::MismatchError& e) {
    return e.what();
  } catch (const hvd::Error& e) {
    FAIL_CHECK("wrong error type: " << e.what());
  }
  return "";
}

}  // namespace

TEST_CASE("an error only one rank sees fails the tensor on every rank, naming it",
          "[local_errors]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank(), odd = n - 1;
  std::vector<float> v(8, 1.0f);
  hvd::AllreduceOptions sum;
  sum.op = ReduceOp::kSum;
  for (bool cached : {false, true}) {
    INFO("cached first: " << cached);
    // A name of its own per round: the failed submission keeps its name pending on the odd
    // rank until the others have reached it.
    const std::string name = std::string("only.one.") + (cached ? "cached" : "fresh");
    if (cached) {  // the others' submission is then a cache hit
      for (int k = 0; k < 2; ++k) {
        wait_ok(
            hvd::allreduce_async(name, hvd::TensorView(v.data(), DataType::kFloat32, {8}), sum));
      }
    }
    if (me == odd) {
      try {
        hvd::allreduce_async(name, hvd::TensorView(nullptr, DataType::kFloat32, {8}), sum);
        FAIL_CHECK("a null input was accepted");
      } catch (const hvd::InvalidArgumentError& e) {
        CHECK_THAT(e.what(), Catch::Contains("null"));
      }
    } else {
      const std::string m = error_of(
          hvd::allreduce_async(name, hvd::TensorView(v.data(), DataType::kFloat32, {8}), sum));
      CHECK_THAT(m, Catch::Contains("'" + name + "'"));
      CHECK_THAT(m, Catch::Contains("rank " + std::to_string(odd) + ": "));
      CHECK_THAT(m, Catch::Contains("null"));
    }
  }
  // A grouped allreduce where one member fails on one rank only (average of a bool tensor).
  uint8_t flags[4] = {1, 0, 1, 1};
  float f[4] = {1, 2, 3, 4};
  hvd::AllreduceOptions avg;
  std::vector<hvd::TensorView> members = {hvd::TensorView(f, DataType::kFloat32, {4}),
                                          me == odd ? hvd::TensorView(flags, DataType::kBool, {4})
                                                    : hvd::TensorView(f, DataType::kFloat32, {4})};
  if (me == odd) {
    CHECK_THROWS_AS(hvd::grouped_allreduce_async({"grp.a", "grp.b"}, members, avg),
                    hvd::InvalidArgumentError);
  } else {
    members[1] = hvd::TensorView(f + 0, DataType::kFloat32, {4});
    std::vector<float> g(4, 1.0f);
    members[0] = hvd::TensorView(g.data(), DataType::kFloat32, {4});
    const std::string m = error_of(hvd::grouped_allreduce_async({"grp.a", "grp.b"}, members, avg));
    CHECK_THAT(m, Catch::Contains("rank " + std::to_string(odd) + ": "));
    CHECK_THAT(m, Catch::Contains("bool"));
  }
  // Unnamed calls stay numbered alike on every rank after a failed one.
  if (me == odd) {
    CHECK_THROWS_AS(
        hvd::allreduce_async("", hvd::TensorView(nullptr, DataType::kFloat32, {8}), sum),
        hvd::InvalidArgumentError);
  } else {
    CHECK_THAT(
        error_of(hvd::allreduce_async("", hvd::TensorView(v.data(), DataType::kFloat32, {8}), sum)),
        Catch::Contains("rank " + std::to_string(odd)));
  }
  float x = static_cast<float>(me);
  wait_ok(hvd::allreduce_async("", hvd::TensorView(&x, DataType::kFloat32, {1}), sum));
  CHECK(x == static_cast<float>(n * (n - 1) / 2));
}

TEST_CASE("alltoall over the MPI size limit fails on every rank, naming the rank",
          "[local_errors]") {
  Session s;
  const int n = hvd::size();
  // 1 GiB of address space per rank, never touched: the tensor must fail in negotiation.
  const size_t bytes = size_t{1} << 30;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  REQUIRE(p != MAP_FAILED);
  std::vector<int64_t> splits(static_cast<size_t>(n), 0);
  splits[0] = static_cast<int64_t>(bytes);  // everything to rank 0: n GiB >= 2 GiB there
  const std::string m = error_of(hvd::alltoall_async(
      "a2a.huge", hvd::TensorView(p, DataType::kUInt8, {static_cast<int64_t>(bytes), 1}), splits));
  CHECK_THAT(m, Catch::Contains("rank 0 would send"));
  CHECK_THAT(m, Catch::Contains("2^31-1"));
  munmap(p, bytes);
  float x = 1.0f;
  hvd::AllreduceOptions sum;
  sum.op = ReduceOp::kSum;
  wait_ok(hvd::allreduce_async("after.a2a", hvd::TensorView(&x, DataType::kFloat32, {1}), sum));
  CHECK(x == static_cast<float>(n));
}

TEST_CASE("alltoall splits whose sum overflows fail on every rank, naming the rank",
          "[local_errors]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank(), odd = n - 1;
  std::vector<float> in(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) in[static_cast<size_t>(k)] = static_cast<float>(me * 100 + k);
  std::vector<int64_t> splits(static_cast<size_t>(n), 1);
  const hvd::TensorView view(in.data(), DataType::kFloat32, {n});
  if (me == odd) {
    // INT64_MAX + 1 wraps to a negative sum, which would pass "sum <= dimension 0".
    std::vector<int64_t> wrap(static_cast<size_t>(n), 0);
    wrap[0] = INT64_MAX;
    wrap[1] = 1;
    try {
      hvd::alltoall_async("a2a.wrap", view, wrap);
      FAIL_CHECK("splits summing past 2^63-1 were accepted");
    } catch (const hvd::InvalidArgumentError& e) {
      CHECK_THAT(e.what(), Catch::Contains("alltoall 'a2a.wrap'"));
      CHECK_THAT(e.what(), Catch::Contains("splits sum past 2^63-1"));
    }
  } else {
    const std::string m = error_of(hvd::alltoall_async("a2a.wrap", view, splits));
    CHECK_THAT(m, Catch::Contains("'a2a.wrap'"));
    CHECK_THAT(m, Catch::Contains("rank " + std::to_string(odd) + ": "));
    CHECK_THAT(m, Catch::Contains("splits sum past 2^63-1"));
  }
  // The next alltoall works: rank r receives element r of every rank.
  hvd::Handle h = hvd::alltoall_async("a2a.after.wrap", view, splits);
  wait_ok(h);
  const hvd::Tensor out = h.result();
  REQUIRE(out.numel() == n);
  const float* got = static_cast<const float*>(out.data());
  for (int k = 0; k < n; ++k) CHECK(got[k] == static_cast<float>(k * 100 + me));
}

TEST_CASE("process sets added from two threads at once", "[local_errors][process_sets]") {
  Session s;
  const int n = hvd::size();
  std::vector<int> all(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) all[static_cast<size_t>(r)] = r;
  hvd::ProcessSet sets[2];
  std::atomic<int> failures{0};
  std::thread threads[2];
  for (int t = 0; t < 2; ++t) {
    threads[t] = std::thread([&, t] {
      try {
        sets[t] = hvd::add_process_set(all);
      } catch (const hvd::Error& e) {
        ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE(failures == 0);
  CHECK(sets[0].id != sets[1].id);
  // Which thread got which id may differ from rank to rank (both sets have the same members):
  // use them in id order, the same on every rank.
  std::sort(std::begin(sets), std::end(sets),
            [](const hvd::ProcessSet& a, const hvd::ProcessSet& b) { return a.id < b.id; });
  for (auto& ps : sets) {
    float x = static_cast<float>(hvd::rank() + 1);
    hvd::AllreduceOptions o;
    o.op = ReduceOp::kSum;
    o.process_set = ps;
    wait_ok(hvd::allreduce_async("in.set", hvd::TensorView(&x, DataType::kFloat32, {1}), o));
    CHECK(x == static_cast<float>(n * (n + 1) / 2));
    hvd::remove_process_set(ps);
  }
}

TEST_CASE("shape checks name the tensor and what differs; out-of-place results are exact",
          "[local_errors]") {
  // The input's shape moves into the request and the views keep none (docs/design.md): the
  // checks read the request's shape and the transports size tensors from the response.
  Session s;
  const int n = hvd::size(), me = hvd::rank(), odd = n - 1;
  hvd::AllreduceOptions sum;
  sum.op = ReduceOp::kSum;
  std::vector<float> in(12), out(12, -1.0f), small(4);
  // A negative dimension on one rank.
  if (me == odd) {
    try {
      hvd::allreduce_async("shape.neg", hvd::TensorView(in.data(), DataType::kFloat32, {3, -4}),
                           sum);
      FAIL_CHECK("a negative dimension was accepted");
    } catch (const hvd::InvalidArgumentError& e) {
      CHECK_THAT(e.what(), Catch::Contains("negative dimension [3,-4]"));
    }
  } else {
    const std::string m = error_of(hvd::allreduce_async(
        "shape.neg", hvd::TensorView(in.data(), DataType::kFloat32, {3, 4}), sum));
    CHECK_THAT(m, Catch::Contains("'shape.neg'"));
    CHECK_THAT(m, Catch::Contains("rank " + std::to_string(odd) + ": "));
    CHECK_THAT(m, Catch::Contains("negative dimension"));
  }
  // An output that does not match the input, on one rank.
  const hvd::TensorView input(in.data(), DataType::kFloat32, {3, 4});
  if (me == odd) {
    try {
      hvd::allreduce_async("shape.out", input,
                           hvd::TensorView(small.data(), DataType::kFloat32, {4}), sum);
      FAIL_CHECK("a mismatched output was accepted");
    } catch (const hvd::InvalidArgumentError& e) {
      CHECK_THAT(e.what(), Catch::Contains("output float32[4] does not match input float32[3,4]"));
    }
  } else {
    const std::string m = error_of(hvd::allreduce_async(
        "shape.out", input, hvd::TensorView(out.data(), DataType::kFloat32, {3, 4}), sum));
    CHECK_THAT(m, Catch::Contains("rank " + std::to_string(odd) + ": "));
    CHECK_THAT(m, Catch::Contains("does not match input"));
  }
  // Out of place, three tensors of different sizes at once (fused), twice (the second time
  // from the response cache): every element of every output, inputs untouched.
  const int64_t sizes[3] = {12, 5, 1};
  std::vector<std::vector<float>> ins(3), outs(3);
  for (int round = 0; round < 2; ++round) {
    std::vector<hvd::Handle> hs;
    for (int t = 0; t < 3; ++t) {
      ins[t].assign(static_cast<size_t>(sizes[t]), 0.0f);
      for (int64_t k = 0; k < sizes[t]; ++k) ins[t][k] = static_cast<float>(me * 100 + t * 10 + k);
      outs[t].assign(static_cast<size_t>(sizes[t]), -7.0f);
      hs.push_back(hvd::allreduce_async(
          "oop." + std::to_string(t),
          hvd::TensorView(ins[t].data(), DataType::kFloat32, {sizes[t]}),
          hvd::TensorView(outs[t].data(), DataType::kFloat32, {sizes[t]}), sum));
    }
    for (auto& h : hs) wait_ok(h);
    for (int t = 0; t < 3; ++t) {
      for (int64_t k = 0; k < sizes[t]; ++k) {
        const float want = static_cast<float>(100 * n * (n - 1) / 2 + n * (t * 10 + k));
        CHECK(outs[t][k] == want);
        CHECK(ins[t][k] == static_cast<float>(me * 100 + t * 10 + k));
      }
    }
  }
}
