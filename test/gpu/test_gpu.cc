// Copyright horovod_cpp authors. Multi-rank tests of the GPU data plane (NCCL).
//
// Without a usable CUDA device on every rank (or with fewer GPUs than ranks on a host) the
// whole executable reports itself skipped: every rank agrees, then exits with code 77, which
// CTest reads as "skipped" (SKIP_RETURN_CODE), never as passed.
//
// Values are checked element by element on the host after copying results back.
#define CATCH_CONFIG_EXTERNAL_INTERFACES  // the listener below
#include <cuda_runtime.h>
#include <mpi.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gpu_test_util.h"

using hvd::DataType;
using hvd::ReduceOp;
using namespace hvdtest;

namespace {

// ---- skipping without a device ---------------------------------------------------------------

struct GpuSkipListener : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testRunStarting(Catch::TestRunInfo const& info) override {
    TestEventListenerBase::testRunStarting(info);
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      count = 0;
    }
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
    int local_size = 1;
    MPI_Comm_size(local, &local_size);
    MPI_Comm_free(&local);
    // Several ranks share a GPU only when asked to (NCCL >= 2.30 runs them; docs/gpu.md).
    const bool sharing = std::getenv("NCCL_MULTI_RANK_GPU_ENABLE") != nullptr ||
                         std::getenv("HOROVOD_CPP_CUDA_DEVICE") != nullptr;
    int usable = (count > 0 && (count >= local_size || sharing)) ? 1 : 0;
    int all_usable = 0;
    MPI_Allreduce(&usable, &all_usable, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (all_usable) return;
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (!usable) {
      std::fprintf(stderr, "horovod_cpp GPU tests: rank %d: %s (%d device(s) for %d rank(s) on this host)\n",
                   rank, e != cudaSuccess ? cudaGetErrorString(e) : "not enough CUDA devices", count,
                   local_size);
    }
    if (rank == 0) std::printf("horovod_cpp GPU tests: SKIPPED (no usable CUDA device on some rank)\n");
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Finalize();
    std::exit(77);
  }
};
CATCH_REGISTER_LISTENER(GpuSkipListener)

// ---- helpers -----------------------------------------------------------------------------------

double value(int r, int64_t i, DataType d, ReduceOp op) {
  if (d == DataType::kBool) return ((i + r) % 3) == 0 ? 1 : 0;
  if (op == ReduceOp::kProduct) return static_cast<double>(((i + r) % 2) + 1);
  double v = static_cast<double>((i * 7 + r * 13) % 31);
  if (is_signed_dtype(d)) v -= 10;
  return v;
}

double reduce_expected(int64_t i, DataType d, ReduceOp op, int n, double pre = 1, double post = 1) {
  double acc = value(0, i, d, op) * pre;
  for (int r = 1; r < n; ++r) {
    const double v = value(r, i, d, op) * pre;
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage: acc += v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      case ReduceOp::kProduct: acc *= v; break;
    }
  }
  if (d == DataType::kBool) {
    if (op == ReduceOp::kSum || op == ReduceOp::kMax) return acc != 0 ? 1 : 0;
    return acc;
  }
  if (op == ReduceOp::kAverage) {
    if (hvd::is_floating_point(d)) return acc / n * post;
    return std::trunc(acc / n);
  }
  return acc * post;
}

double tolerance(DataType d, double magnitude) {
  switch (d) {
    case DataType::kFloat16: return 2e-3 * std::max(1.0, std::fabs(magnitude)) + 1e-3;
    case DataType::kBFloat16: return 1.6e-2 * std::max(1.0, std::fabs(magnitude)) + 1e-2;
    case DataType::kFloat32: return 1e-5 * std::max(1.0, std::fabs(magnitude));
    case DataType::kFloat64: return 1e-12 * std::max(1.0, std::fabs(magnitude));
    default: return 0;
  }
}

Buffer filled(DataType d, std::vector<int64_t> shape, ReduceOp op) {
  Buffer b(d, std::move(shape));
  for (int64_t i = 0; i < b.n(); ++i) b.set(i, value(hvd::rank(), i, d, op));
  return b;
}

void check_allreduce(Buffer got, DataType d, ReduceOp op, double pre = 1, double post = 1) {
  const int n = hvd::size();
  int bad = 0;
  for (int64_t i = 0; i < got.n() && bad < 5; ++i) {
    const double want = reduce_expected(i, d, op, n, pre, post);
    if (std::fabs(got.get(i) - want) > tolerance(d, want)) {
      ++bad;
      FAIL_CHECK(hvd::dtype_name(d) << " " << hvd::reduce_op_name(op) << " element " << i << ": got "
                                    << got.get(i) << ", want " << want);
    }
  }
}

const std::vector<DataType>& nccl_dtypes() {  // NCCL has no int16
  static const std::vector<DataType> v = {DataType::kUInt8,   DataType::kInt8,     DataType::kInt32,
                                          DataType::kInt64,   DataType::kFloat16,  DataType::kBFloat16,
                                          DataType::kFloat32, DataType::kFloat64,  DataType::kBool};
  return v;
}

const std::vector<ReduceOp>& all_ops() {
  static const std::vector<ReduceOp> v = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin,
                                          ReduceOp::kMax, ReduceOp::kProduct};
  return v;
}

}  // namespace

TEST_CASE("gpu: builds with CUDA report it", "[gpu]") {
  CHECK(hvd::cuda_built());
}

TEST_CASE("gpu: allreduce, every NCCL dtype x every op, in place and out of place", "[gpu][allreduce]") {
  Session s;
  for (DataType d : nccl_dtypes()) {
    for (ReduceOp op : all_ops()) {
      if (d == DataType::kBool && op == ReduceOp::kAverage) continue;
      const std::string name = std::string("ar.") + hvd::dtype_name(d) + "." + hvd::reduce_op_name(op);
      DeviceBuffer t(filled(d, {5, 7}, op));
      hvd::AllreduceOptions o;
      o.op = op;
      if (wait_ok(hvd::allreduce_async(name, t.view(), o))) check_allreduce(t.download(), d, op);
      DeviceBuffer in(filled(d, {33}, op));
      DeviceBuffer out(Buffer(d, {33}));
      if (wait_ok(hvd::allreduce_async(name + ".oop", in.view(), out.view(), o))) {
        check_allreduce(out.download(), d, op);
        Buffer unchanged = in.download();
        for (int64_t i = 0; i < unchanged.n(); ++i) CHECK(unchanged.get(i) == value(hvd::rank(), i, d, op));
      }
    }
  }
}

TEST_CASE("gpu: allreduce prescale and postscale (float16, bfloat16, float32, float64)", "[gpu][allreduce]") {
  Session s;
  for (DataType d : {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      DeviceBuffer t(filled(d, {100}, op));
      hvd::AllreduceOptions o;
      o.op = op;
      o.prescale_factor = 0.5;
      o.postscale_factor = 4.0;
      if (wait_ok(hvd::allreduce_async(std::string("scale.") + hvd::dtype_name(d) + hvd::reduce_op_name(op),
                                       t.view(), o))) {
        check_allreduce(t.download(), d, op, 0.5, 4.0);
      }
    }
  }
}

TEST_CASE("gpu: fusion: many small allreduces in one cycle, grouped and not", "[gpu][fusion]") {
  Session s;
  for (DataType d : {DataType::kFloat32, DataType::kFloat16, DataType::kInt32}) {
    std::vector<std::unique_ptr<DeviceBuffer>> bufs;
    std::vector<hvd::Handle> hs;
    std::vector<std::string> names;
    std::vector<hvd::TensorView> views;
    for (int k = 0; k < 40; ++k) {
      bufs.push_back(std::make_unique<DeviceBuffer>(filled(d, {k + 1, 3}, ReduceOp::kSum)));
      hvd::AllreduceOptions o;
      o.op = ReduceOp::kSum;
      hs.push_back(hvd::allreduce_async("fuse." + std::to_string(k) + hvd::dtype_name(d), bufs.back()->view(), o));
    }
    for (auto& h : hs) wait_ok(h);
    for (auto& b : bufs) check_allreduce(b->download(), d, ReduceOp::kSum);
    std::vector<std::unique_ptr<DeviceBuffer>> group;
    for (int k = 0; k < 10; ++k) {
      group.push_back(std::make_unique<DeviceBuffer>(filled(d, {k + 2}, ReduceOp::kAverage)));
      names.push_back("grp." + std::to_string(k) + hvd::dtype_name(d));
      views.push_back(group.back()->view());
    }
    hvd::AllreduceOptions o;
    o.op = ReduceOp::kAverage;
    if (wait_ok(hvd::grouped_allreduce_async(names, views, o))) {
      for (auto& b : group) check_allreduce(b->download(), d, ReduceOp::kAverage);
    }
  }
}

TEST_CASE("gpu: allreduce waits for the producer's stream", "[gpu][allreduce]") {
  Session s;
  CUDA_OK(cudaSetDevice(my_device()));
  cudaStream_t producer;
  CUDA_OK(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));
  const int64_t n = 1 << 20;
  Buffer zeros(DataType::kFloat32, {n});
  DeviceBuffer t(zeros);
  // The data is written on the producer stream, asynchronously, just before the submission.
  std::vector<float> ones(static_cast<size_t>(n), static_cast<float>(hvd::rank() + 1));
  float* pinned = nullptr;
  CUDA_OK(cudaMallocHost(reinterpret_cast<void**>(&pinned), ones.size() * sizeof(float)));
  std::copy(ones.begin(), ones.end(), pinned);
  CUDA_OK(cudaMemcpyAsync(t.ptr, pinned, ones.size() * sizeof(float), cudaMemcpyHostToDevice, producer));
  hvd::AllreduceOptions o;
  o.op = ReduceOp::kSum;
  if (wait_ok(hvd::allreduce_async("stream.wait", t.view(producer), o))) {
    Buffer got = t.download();
    const double want = hvd::size() * (hvd::size() + 1) / 2.0;
    int bad = 0;
    for (int64_t i = 0; i < n && bad < 5; ++i) {
      if (got.get(i) != want) {
        ++bad;
        FAIL_CHECK("element " << i << ": " << got.get(i) << " != " << want);
      }
    }
  }
  cudaStreamSynchronize(producer);
  cudaFreeHost(pinned);
  cudaStreamDestroy(producer);
}

// Allgather test data: exact in every tested dtype, bfloat16 included (integers up to 256 are
// exact there), for up to 16 ranks.
static double gather_value(int rank, int64_t i) { return rank * 16 + i % 16; }

TEST_CASE("gpu: allgather with a variable first dimension", "[gpu][allgather]") {
  Session s;
  for (DataType d : {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kInt64, DataType::kInt16}) {
    for (bool equal : {true, false}) {
      const int me = hvd::rank();
      const int64_t rows = equal ? 3 : me + 1;
      Buffer b(d, {rows, 4});
      for (int64_t i = 0; i < b.n(); ++i) b.set(i, gather_value(me, i));
      DeviceBuffer t(b);
      hvd::Tensor out;
      try {
        out = hvd::allgather(std::string("ag.") + hvd::dtype_name(d) + (equal ? ".eq" : ".var"), t.view());
      } catch (const hvd::Error& e) {
        FAIL_CHECK(e.what());
        continue;
      }
      REQUIRE(out.device() == hvd::Device::cuda(my_device()));
      Buffer got = download(out);
      int64_t row = 0;
      for (int r = 0; r < hvd::size(); ++r) {
        const int64_t rr = equal ? 3 : r + 1;
        for (int64_t i = 0; i < rr * 4; ++i) CHECK(got.get(row * 4 + i) == gather_value(r, i));
        row += rr;
      }
      CHECK(got.shape[0] == row);
    }
  }
}

TEST_CASE("gpu: broadcast from every root", "[gpu][broadcast]") {
  Session s;
  for (int root = 0; root < hvd::size(); ++root) {
    for (DataType d : {DataType::kFloat32, DataType::kBFloat16, DataType::kUInt8}) {
      Buffer b(d, {17});
      for (int64_t i = 0; i < b.n(); ++i) b.set(i, hvd::rank() * 10 + i);
      DeviceBuffer t(b);
      hvd::broadcast(std::string("bc.") + std::to_string(root) + hvd::dtype_name(d), t.view(), root);
      Buffer got = t.download();
      for (int64_t i = 0; i < got.n(); ++i) CHECK(got.get(i) == root * 10 + i);
    }
  }
}

TEST_CASE("gpu: alltoall with uneven splits", "[gpu][alltoall]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank();
  std::vector<int64_t> splits(static_cast<size_t>(n));
  int64_t rows = 0;
  for (int r = 0; r < n; ++r) rows += (splits[static_cast<size_t>(r)] = (me + r) % 3);
  Buffer b(DataType::kFloat32, {rows, 2});
  int64_t row = 0;
  for (int r = 0; r < n; ++r) {
    for (int64_t k = 0; k < splits[static_cast<size_t>(r)]; ++k, ++row) {
      b.set(row * 2, me * 1000 + r * 10 + k);
      b.set(row * 2 + 1, -1);
    }
  }
  DeviceBuffer t(b);
  hvd::AlltoallResult res = hvd::alltoall("a2a", t.view(), splits);
  Buffer got = download(res.output);
  row = 0;
  for (int r = 0; r < n; ++r) {
    const int64_t k_rows = (r + me) % 3;
    CHECK(res.received_splits[static_cast<size_t>(r)] == k_rows);
    for (int64_t k = 0; k < k_rows; ++k, ++row) {
      CHECK(got.get(row * 2) == r * 1000 + me * 10 + k);
      CHECK(got.get(row * 2 + 1) == -1);
    }
  }
}

TEST_CASE("gpu: reducescatter, even and uneven, sum and average", "[gpu][reducescatter]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank();
  for (DataType d : {DataType::kFloat32, DataType::kFloat16, DataType::kInt32}) {
    for (int64_t dim0 : {static_cast<int64_t>(2 * n), static_cast<int64_t>(2 * n + 1)}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
        DeviceBuffer t(filled(d, {dim0, 3}, op));
        hvd::ReducescatterOptions o;
        o.op = op;
        hvd::Tensor out = hvd::reducescatter(std::string("rs.") + hvd::dtype_name(d) + std::to_string(dim0) +
                                                 hvd::reduce_op_name(op), t.view(), o);
        Buffer got = download(out);
        int64_t first = 0;
        for (int r = 0; r < me; ++r) first += dim0 / n + (r < dim0 % n ? 1 : 0);
        const int64_t my_rows = dim0 / n + (me < dim0 % n ? 1 : 0);
        REQUIRE(got.shape[0] == my_rows);
        for (int64_t i = 0; i < my_rows * 3; ++i) {
          const double want = reduce_expected(first * 3 + i, d, op, n);
          CHECK(std::fabs(got.get(i) - want) <= tolerance(d, want));
        }
      }
    }
  }
}

TEST_CASE("gpu: hierarchical allreduce gives the flat results", "[gpu][hierarchical]") {
  ScopedEnv env({{"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"}});
  Session s;
  for (DataType d : {DataType::kFloat32, DataType::kFloat16, DataType::kInt32}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax}) {
      DeviceBuffer t(filled(d, {101}, op));  // not a multiple of the local size: padded
      hvd::AllreduceOptions o;
      o.op = op;
      if (wait_ok(hvd::allreduce_async(std::string("hier.") + hvd::dtype_name(d) + hvd::reduce_op_name(op),
                                       t.view(), o))) {
        check_allreduce(t.download(), d, op);
      }
    }
  }
}

TEST_CASE("gpu: errors are clear and per tensor", "[gpu][errors]") {
  Session s;
  // A tensor on another rank's GPU is rejected at once, naming the device to use.
  int count = 0;
  cudaGetDeviceCount(&count);
  if (count > 1) {
    const int other = (my_device() + 1) % count;
    float x = 0;
    hvd::TensorView v(&x, DataType::kFloat32, {1}, hvd::Device::cuda(other));
    try {
      hvd::allreduce("wrong.device", v);
      FAIL_CHECK("a tensor on the wrong GPU was accepted");
    } catch (const hvd::InvalidArgumentError& e) {
      CHECK_THAT(e.what(), Catch::Contains("cuda:" + std::to_string(my_device())));
    }
  }
  // NCCL has no int16 reduction: the tensor fails on every rank with a clear message, and the
  // next collective works.
  DeviceBuffer t(filled(DataType::kInt16, {8}, ReduceOp::kSum));
  try {
    hvd::allreduce("int16.sum", t.view(), hvd::AllreduceOptions{ReduceOp::kSum});
    FAIL_CHECK("int16 allreduce on the GPU did not fail");
  } catch (const hvd::Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("int16"));
    CHECK_THAT(e.what(), Catch::Contains("int16.sum"));
  }
  DeviceBuffer ok(filled(DataType::kFloat32, {8}, ReduceOp::kSum));
  if (wait_ok(hvd::allreduce_async("after.error", ok.view(), hvd::AllreduceOptions{ReduceOp::kSum}))) {
    check_allreduce(ok.download(), DataType::kFloat32, ReduceOp::kSum);
  }
  // CPU and GPU tensors of one name disagree across ranks only if ranks differ: here, a CPU
  // tensor next to GPU ones runs on the CPU plane (no fusion across devices).
  Buffer cpu = filled(DataType::kFloat32, {8}, ReduceOp::kSum);
  DeviceBuffer gpu(filled(DataType::kFloat32, {8}, ReduceOp::kSum));
  auto h1 = hvd::allreduce_async("mixed.cpu", cpu.view(), hvd::AllreduceOptions{ReduceOp::kSum});
  auto h2 = hvd::allreduce_async("mixed.gpu", gpu.view(), hvd::AllreduceOptions{ReduceOp::kSum});
  if (wait_ok(h1)) check_allreduce(cpu, DataType::kFloat32, ReduceOp::kSum);
  if (wait_ok(h2)) check_allreduce(gpu.download(), DataType::kFloat32, ReduceOp::kSum);
}
