// Copyright horovod_cpp authors. Multi-rank tests of the LibTorch adapter on CUDA tensors
// (horovod_cpp/torch.h built with HOROVOD_CPP_TORCH_CUDA): the device check that skips the
// executable, and the collectives; training and broadcasts are in test_torch_cuda_training.cc.
//
// Without a usable CUDA device on every rank the whole executable reports itself skipped: every
// rank agrees, then exits with code 77, which CTest reads as "skipped" (SKIP_RETURN_CODE), never
// as passed. Each rank uses the device the library uses: HOROVOD_CPP_CUDA_DEVICE when set, else
// its local rank modulo the device count (several ranks may share one GPU with
// NCCL_MULTI_RANK_GPU_ENABLE=1).
//
// Every expected value is computed on each rank from data seeded by rank, so each rank knows
// what every other rank sent. Collectives carry small integers, exact in float16 and float32,
// and are compared element by element; training is compared with a local reference within a
// tolerance (sums in another order), and across ranks bit for bit.
#define CATCH_CONFIG_EXTERNAL_INTERFACES  // the listener below
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <mpi.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "horovod_cpp/torch.h"
#include "torch_cuda_test_util.h"

using namespace hvdtorchcudatest;  // NOLINT(google-build-using-namespace): test helpers

namespace {

// ---- skipping without a device ---------------------------------------------------------------

struct TorchCudaSkipListener : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testRunStarting(Catch::TestRunInfo const& info) override {
    TestEventListenerBase::testRunStarting(info);
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
    int local_rank = 0, local_size = 1;
    MPI_Comm_rank(local, &local_rank);
    MPI_Comm_size(local, &local_size);
    MPI_Comm_free(&local);
    const int count =
        ::torch::cuda::is_available() ? static_cast<int>(::torch::cuda::device_count()) : 0;
    const char* chosen = std::getenv("HOROVOD_CPP_CUDA_DEVICE");
    const char* shared = std::getenv("NCCL_MULTI_RANK_GPU_ENABLE");
    std::string why;
    if (count == 0) {
      why = "torch::cuda::is_available() is false";
    } else if (chosen && *chosen) {
      g_device = std::atoi(chosen);
      if (g_device < 0 || g_device >= count) {
        why = "HOROVOD_CPP_CUDA_DEVICE=" + std::string(chosen) + " but " + std::to_string(count) +
              " device(s)";
      }
    } else if (count < local_size && !(shared && std::string(shared) == "1")) {
      why = std::to_string(local_size) + " ranks on this host share " + std::to_string(count) +
            " device(s) (set NCCL_MULTI_RANK_GPU_ENABLE=1 or HOROVOD_CPP_CUDA_DEVICE)";
    } else {
      g_device = local_rank % count;
    }
    int usable = why.empty() ? 1 : 0, all_usable = 0;
    MPI_Allreduce(&usable, &all_usable, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (all_usable) return;
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (!usable)
      std::fprintf(stderr, "horovod_cpp LibTorch CUDA tests: rank %d: %s\n", rank, why.c_str());
    if (rank == 0)
      std::printf(
          "horovod_cpp LibTorch CUDA tests: SKIPPED (no usable CUDA device on some rank)\n");
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Finalize();
    std::exit(77);
  }
};
CATCH_REGISTER_LISTENER(TorchCudaSkipListener)

}  // namespace

// ---- collectives through view() and to_torch() -------------------------------------------------

TEST_CASE("torch CUDA allreduce: sum and average of float32 and float16 tensors",
          "[torch][cuda][allreduce]") {
  Session s;
  const int n = hvd::size();
  // Average divides by the size: exact when it is a power of two, else within rounding.
  const bool exact_average = (n & (n - 1)) == 0;
  for (auto dtype : {at::kFloat, at::kHalf}) {
    for (auto op : {hvd::ReduceOp::kSum, hvd::ReduceOp::kAverage}) {
      const std::string name =
          std::string("cuda.allreduce.") + c10::toString(dtype) + "." + hvd::reduce_op_name(op);
      at::Tensor t = ints_of(hvd::rank(), {37, 29}, 1, dtype).to(dev());
      hvd::AllreduceOptions ao;
      ao.op = op;
      hvd::allreduce(name, hvd::torch::view(t), ao);
      at::Tensor want = at::zeros({37, 29}, at::kDouble);
      for (int r = 0; r < n; ++r) want += ints_of(r, {37, 29}, 1, dtype).to(at::kDouble);
      if (op == hvd::ReduceOp::kAverage) want /= n;
      if (op == hvd::ReduceOp::kSum || exact_average) {
        check_equal(t, want.to(dtype), name);
      } else {
        check_close(t, want, dtype == at::kHalf ? 2e-3 : 1e-6, 0.0, name);
      }
    }
  }
  // Out of place: the input is left alone.
  at::Tensor in = ints_of(hvd::rank(), {64}, 2, at::kFloat).to(dev());
  at::Tensor out = at::empty_like(in);
  hvd::allreduce("cuda.allreduce.out_of_place", hvd::torch::view(in), hvd::torch::view(out),
                 hvd::AllreduceOptions{hvd::ReduceOp::kSum});
  at::Tensor want = at::zeros({64}, at::kFloat);
  for (int r = 0; r < n; ++r) want += ints_of(r, {64}, 2, at::kFloat);
  check_equal(out, want, "out-of-place allreduce output");
  check_equal(in, ints_of(hvd::rank(), {64}, 2, at::kFloat), "out-of-place allreduce input");
}

TEST_CASE(
    "torch CUDA allgather: different first dimensions; the result on this device, from torch's "
    "allocator",
    "[torch][cuda][allgather]") {
  Session s;
  const int n = hvd::size();
  auto rows_of = [](int r, at::ScalarType dtype) { return ints_of(r, {r + 1, 3}, 3, dtype); };
  for (auto dtype : {at::kFloat, at::kLong}) {
    const std::string name = std::string("cuda.allgather.") + c10::toString(dtype);
    at::Tensor mine = rows_of(hvd::rank(), dtype).to(dev());
    const int64_t before = torch_allocated_bytes();
    hvd::Tensor res = hvd::allgather(name, hvd::torch::view(mine));
    const int64_t after = torch_allocated_bytes();
    CHECK(res.device().is_cuda());
    CHECK(res.device().index == g_device);
    // The library allocated the output through LibTorch's caching allocator (view() installed it).
    CHECK(after - before >= res.nbytes());
    at::Tensor got = hvd::torch::to_torch(res);
    CHECK(got.data_ptr() == res.data());  // no copy
    std::vector<at::Tensor> parts;
    for (int r = 0; r < n; ++r) parts.push_back(rows_of(r, dtype));
    check_equal(got, at::cat(parts), name);
  }
}

TEST_CASE("torch CUDA broadcast: every rank gets the root's values", "[torch][cuda][broadcast]") {
  Session s;
  const int root = hvd::size() - 1;
  for (auto dtype : {at::kFloat, at::kHalf}) {
    const std::string name = std::string("cuda.broadcast.") + c10::toString(dtype);
    at::Tensor t = ints_of(hvd::rank(), {101}, 4, dtype).to(dev());
    hvd::broadcast(name, hvd::torch::view(t), root);
    check_equal(t, ints_of(root, {101}, 4, dtype), name);
  }
}

TEST_CASE("torch CUDA reducescatter and alltoall through the public API and to_torch",
          "[torch][cuda][reducescatter][alltoall]") {
  Session s;
  const int n = hvd::size(), r = hvd::rank();

  // Reducescatter of 2n+1 rows: the first (2n+1) % n ranks get one row more.
  const int64_t rows = 2 * n + 1;
  at::Tensor in = ints_of(r, {rows, 4}, 5, at::kFloat).to(dev());
  hvd::ReducescatterOptions ro;
  ro.op = hvd::ReduceOp::kSum;
  at::Tensor got =
      hvd::torch::to_torch(hvd::reducescatter("cuda.reducescatter", hvd::torch::view(in), ro));
  at::Tensor sum = at::zeros({rows, 4}, at::kFloat);
  for (int q = 0; q < n; ++q) sum += ints_of(q, {rows, 4}, 5, at::kFloat);
  const int64_t base = rows / n, extra = rows % n;
  const int64_t mine = base + (r < extra ? 1 : 0), offset = r * base + std::min<int64_t>(r, extra);
  check_equal(got, sum.slice(0, offset, offset + mine), "reducescatter");

  // Alltoall: rank q sends (q + j) % 3 + 1 rows to rank j; values name the sender and the row.
  auto splits_of = [n](int q) {
    std::vector<int64_t> v;
    for (int j = 0; j < n; ++j) v.push_back((q + j) % 3 + 1);
    return v;
  };
  auto input_of = [&](int q) {
    auto sp = splits_of(q);
    int64_t total = 0;
    for (auto x : sp) total += x;
    return at::arange(total * 2, at::kFloat).reshape({total, 2}) + 1000.0 * q;
  };
  at::Tensor send = input_of(r).to(dev());
  hvd::AlltoallResult res = hvd::alltoall("cuda.alltoall", hvd::torch::view(send), splits_of(r));
  std::vector<at::Tensor> parts;
  std::vector<int64_t> want_splits;
  for (int q = 0; q < n; ++q) {
    auto sp = splits_of(q);
    int64_t off = 0;
    for (int j = 0; j < r; ++j) off += sp[static_cast<size_t>(j)];
    parts.push_back(input_of(q).slice(0, off, off + sp[static_cast<size_t>(r)]));
    want_splits.push_back(sp[static_cast<size_t>(r)]);
  }
  CHECK(res.received_splits == want_splits);
  CHECK(res.output.device().index == g_device);
  check_equal(hvd::torch::to_torch(res.output), at::cat(parts), "alltoall");
}

TEST_CASE("torch CUDA: a collective is ordered after the work queued on torch's current stream",
          "[torch][cuda][streams]") {
  Session s;
  const int n = hvd::size(), r = hvd::rank();
  constexpr int kAdds = 400;  // a long chain of kernels the host does not wait for
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(dev());
  c10::cuda::CUDAStream side =
      c10::cuda::getStreamFromPool(false, static_cast<c10::DeviceIndex>(g_device));
  REQUIRE(side.stream() !=
          c10::cuda::getDefaultCUDAStream(static_cast<c10::DeviceIndex>(g_device)).stream());
  c10::cuda::CUDAStreamGuard guard(side);
  const double total = kAdds * (n * (n + 1) / 2.0);  // sum over ranks of kAdds * (rank + 1)

  at::Tensor t = at::zeros({int64_t{1} << 22}, opts);
  for (int i = 0; i < kAdds; ++i) t.add_(r + 1);
  hvd::TensorView v = hvd::torch::view(t);
  CHECK(v.device.is_cuda());
  CHECK(v.device.index == g_device);
  CHECK(v.stream == static_cast<void*>(side.stream()));
  hvd::allreduce("cuda.ordered.allreduce", v, hvd::AllreduceOptions{hvd::ReduceOp::kSum});
  check_equal(t, at::full({int64_t{1} << 22}, total, at::kFloat),
              "allreduce after a pending kernel chain");

  // The same for an output the library allocates (for this stream, from torch's allocator).
  at::Tensor u = at::zeros({1 << 16}, opts);
  for (int i = 0; i < kAdds; ++i) u.add_(r + 1);
  at::Tensor got =
      hvd::torch::to_torch(hvd::allgather("cuda.ordered.allgather", hvd::torch::view(u)));
  std::vector<at::Tensor> parts;
  for (int q = 0; q < n; ++q) parts.push_back(at::full({1 << 16}, kAdds * (q + 1.0), at::kFloat));
  check_equal(got, at::cat(parts), "allgather after a pending kernel chain");
}
