// Copyright horovod_cpp authors. Multi-rank tests of the LibTorch adapter on CUDA tensors
// (horovod_cpp/torch.h built with HOROVOD_CPP_TORCH_CUDA).
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
#include "torch_test_util.h"

namespace {

constexpr std::chrono::milliseconds kTimeout(120000);

int g_device = -1;  // this rank's CUDA device, chosen by the listener below

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

// ---- helpers -----------------------------------------------------------------------------------

at::Device dev() {
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(g_device));
}

using hvdtorchtest::Session;

hvd::DistributedOptions dist_opts() { return hvdtorchtest::dist_opts_with(kTimeout); }

// Integers in [-8, 8] on the host, seeded by (seed, rank r): sums over a few ranks are exact in
// float16 and float32.
at::Tensor ints_of(int r, at::IntArrayRef shape, uint64_t seed, at::ScalarType dtype) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed * 1000 + static_cast<uint64_t>(r));
  return at::randint(-8, 9, shape, gen, at::kFloat).to(dtype);
}

// Element-by-element equality of a result on this rank's device with a host expectation.
void check_equal(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  INFO(what << " on rank " << hvd::rank());
  REQUIRE(got.device() == dev());
  REQUIRE(got.scalar_type() == want.scalar_type());
  REQUIRE(got.sizes().vec() == want.sizes().vec());
  const at::Tensor g = got.cpu().reshape({-1}), w = want.cpu().reshape({-1});
  const at::Tensor bad = g.ne(w).nonzero();
  if (bad.size(0) > 0) {
    const int64_t i = bad[0][0].item<int64_t>();
    INFO(bad.size(0) << " element(s) differ; the first, element " << i << ": got "
                     << g[i].to(at::kDouble).item<double>() << ", want "
                     << w[i].to(at::kDouble).item<double>());
    CHECK(bad.size(0) == 0);
  }
}

// |got - want| <= atol + rtol * max|want|, computed in double on the host.
void check_close(const at::Tensor& got, const at::Tensor& want, double rtol, double atol,
                 const std::string& what) {
  const at::Tensor g = got.detach().cpu().to(at::kDouble), w = want.detach().cpu().to(at::kDouble);
  const double err = (g - w).abs().max().item<double>();
  const double scale = w.abs().max().item<double>();
  INFO(what << ": max abs difference " << err << " (max |value| " << scale << ") on rank "
            << hvd::rank());
  CHECK(err <= atol + rtol * scale);
}

// True when `t` is bit-identical to rank 0's `t`; the comparison itself goes through the GPU.
bool identical_on_all_ranks(const at::Tensor& t, const std::string& name) {
  at::Tensor root = t.detach().clone().contiguous();
  hvd::broadcast(name, hvd::torch::view(root), 0);
  return ::torch::equal(root, t);
}

// Max |t - rank 0's t|: for results whose last bits may differ across ranks (the CUDA update
// by a sparse gradient with repeated rows adds them with atomics, in no fixed order).
double spread_from_root(const at::Tensor& t, const std::string& name) {
  at::Tensor root = t.detach().clone().contiguous();
  hvd::broadcast(name, hvd::torch::view(root), 0);
  return (root - t).abs().max().item<double>();
}

// Bytes LibTorch's caching allocator has handed out on this rank's device.
int64_t torch_allocated_bytes() {
  return c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(g_device))
      .allocated_bytes[0]  // the aggregate over pools
      .current;
}

at::Tensor flat_params(const ::torch::nn::Module& m) {
  std::vector<at::Tensor> v;
  for (const auto& p : m.parameters()) v.push_back(p.detach().reshape({-1}));
  return ::torch::cat(v);
}

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

// ---- DistributedOptimizer ----------------------------------------------------------------------

namespace {

// Two Linear layers, and one that forward() never uses (its gradient is reduced as zeros).
struct Mlp : ::torch::nn::Module {
  ::torch::nn::Linear fc1{nullptr}, fc2{nullptr}, unused{nullptr};
  explicit Mlp(uint64_t seed) {
    ::torch::manual_seed(seed);
    fc1 = register_module("fc1", ::torch::nn::Linear(5, 8));
    fc2 = register_module("fc2", ::torch::nn::Linear(8, 3));
    unused = register_module("unused", ::torch::nn::Linear(2, 2));
    to(dev());
  }
  at::Tensor forward(const at::Tensor& x) { return fc2->forward(::torch::tanh(fc1->forward(x))); }
};

struct Batch {
  at::Tensor x, y;
};

// Rank q's batch of step `step` (pass `pass`), on this rank's device: every rank can make it.
Batch batch_of(int q, int step, int pass = 0) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(
      static_cast<uint64_t>(10000 * step + 100 * pass + q));
  return {at::randn({4, 5}, gen).to(dev()), at::randn({4, 3}, gen).to(dev())};
}

// Trains 3 steps data-parallel with `d` and `passes` backward passes per step, and a local
// reference on the mean loss of every rank's batches; after each synchronize() the gradients
// must equal the reference's (zeros for the unused layer), and the parameters at the end.
void train_and_compare(hvd::DistributedOptions d, int passes, double rtol, double atol,
                       const std::string& tag) {
  const int n = hvd::size(), r = hvd::rank();
  d.backward_passes_per_step = passes;
  d.average_aggregated_gradients = true;
  Mlp model(77 + static_cast<uint64_t>(r));  // different on purpose: the broadcast fixes it
  hvd::torch::broadcast_parameters(model, 0, kTimeout);
  Mlp ref(77);
  check_equal(flat_params(model), flat_params(ref),
              tag + ": parameters after broadcast_parameters");
  const at::Tensor unused_before = model.unused->weight.detach().clone();
  ::torch::optim::SGD sgd(model.parameters(), ::torch::optim::SGDOptions(0.1).momentum(0.9));
  hvd::torch::DistributedOptimizer opt(sgd, model, d);
  ::torch::optim::SGD rsgd(ref.parameters(), ::torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    for (int p = 0; p < passes; ++p) {
      Batch b = batch_of(r, step, p);
      ::torch::mse_loss(model.forward(b.x), b.y).backward();
    }
    opt.synchronize();
    rsgd.zero_grad();
    for (int q = 0; q < n; ++q) {
      for (int p = 0; p < passes; ++p) {
        Batch b = batch_of(q, step, p);
        (::torch::mse_loss(ref.forward(b.x), b.y) / static_cast<double>(n * passes)).backward();
      }
    }
    auto got = model.named_parameters();
    auto want = ref.named_parameters();
    for (size_t i = 0; i < got.size(); ++i) {
      const std::string what =
          tag + ": step " + std::to_string(step) + " gradient of " + got[i].key();
      const at::Tensor& g = got[i].value().grad();
      REQUIRE(g.defined());
      CHECK(g.device() == dev());
      CHECK(g.scalar_type() == at::kFloat);
      const at::Tensor& w = want[i].value().grad();
      check_close(g, w.defined() ? w : at::zeros_like(g), rtol, atol, what);
    }
    opt.step();
    rsgd.step();
  }
  check_close(flat_params(model), flat_params(ref), rtol, atol, tag + ": parameters after 3 steps");
  CHECK(::torch::equal(model.unused->weight.detach(), unused_before));  // zero gradients, no decay
  CHECK(identical_on_all_ranks(flat_params(model), "cuda." + tag + ".identical"));
}

}  // namespace

TEST_CASE("torch CUDA DistributedOptimizer: averaged gradients, identical parameters",
          "[torch][cuda][optimizer]") {
  Session s;
  train_and_compare(dist_opts(), 1, 1e-5, 1e-6, "dense");
}

TEST_CASE("torch CUDA DistributedOptimizer: backward_passes_per_step=2 averages the passes",
          "[torch][cuda][optimizer]") {
  Session s;
  train_and_compare(dist_opts(), 2, 1e-5, 1e-6, "two passes");
}

TEST_CASE("torch CUDA DistributedOptimizer: fp16 compression stays within fp16 tolerance",
          "[torch][cuda][optimizer][compression]") {
  Session s;
  auto d = dist_opts();
  d.compression = hvd::Compression::kFP16;
  train_and_compare(d, 1, 2e-3, 1e-4, "fp16");
}

TEST_CASE("torch CUDA DistributedOptimizer: staleness keeps every rank identical",
          "[torch][cuda][semisync]") {
  Session s;
  auto d = dist_opts();
  d.staleness = 1;
  Mlp model(5);
  ::torch::optim::SGD sgd(model.parameters(), ::torch::optim::SGDOptions(0.1));
  hvd::torch::DistributedOptimizer opt(sgd, model, d);
  for (int step = 0; step < 3; ++step) {
    Batch b = batch_of(hvd::rank(), step);
    opt.zero_grad();
    ::torch::mse_loss(model.forward(b.x), b.y).backward();
    opt.step();
  }
  opt.flush();
  CHECK(flat_params(model).device() == dev());
  CHECK(identical_on_all_ranks(flat_params(model), "cuda.staleness.identical"));
}

namespace {

constexpr int64_t kVocab = 20, kDim = 4;

// Two sparse embeddings; `extra` is used only when asked (rank 0 here), so on the other ranks it
// has no gradient and is reduced as an empty sparse one.
struct EmbNet : ::torch::nn::Module {
  ::torch::nn::Embedding emb{nullptr}, extra{nullptr};
  EmbNet(bool sparse, uint64_t seed) {
    ::torch::manual_seed(seed);
    emb = register_module(
        "emb", ::torch::nn::Embedding(::torch::nn::EmbeddingOptions(kVocab, kDim).sparse(sparse)));
    extra = register_module(
        "extra",
        ::torch::nn::Embedding(::torch::nn::EmbeddingOptions(kVocab, kDim).sparse(sparse)));
    to(dev());
  }
  at::Tensor forward(const at::Tensor& tokens, bool use_extra) {
    at::Tensor y = emb->forward(tokens).sum(1);
    return use_extra ? y + extra->forward(tokens).sum(1) : y;
  }
};

struct EmbBatch {
  at::Tensor tokens, targets;
};

// Rank q's 3 samples of 2 tokens at step `step`, on this rank's device.
EmbBatch emb_batch_of(int q, int step) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(500 + 10 * step + q));
  return {at::randint(0, kVocab / 2, {3, 2}, gen, at::kLong).to(dev()),
          at::randn({3, kDim}, gen).to(dev())};
}

}  // namespace

TEST_CASE("torch CUDA sparse Embedding: indices and values allgathered on the device",
          "[torch][cuda][sparse]") {
  Session s;
  const int n = hvd::size(), r = hvd::rank();
  EmbNet net(true, 42);
  ::torch::optim::SGD sgd(net.parameters(), ::torch::optim::SGDOptions(0.5));
  hvd::torch::DistributedOptimizer opt(sgd, net, dist_opts());
  EmbNet ref(false, 42);
  ::torch::optim::SGD rsgd(ref.parameters(), ::torch::optim::SGDOptions(0.5));
  for (int step = 0; step < 3; ++step) {
    EmbBatch b = emb_batch_of(r, step);
    opt.zero_grad();
    ::torch::mse_loss(net.forward(b.tokens, r == 0), b.targets).backward();
    opt.synchronize();
    rsgd.zero_grad();
    for (int q = 0; q < n; ++q) {
      EmbBatch bq = emb_batch_of(q, step);
      (::torch::mse_loss(ref.forward(bq.tokens, q == 0), bq.targets) / static_cast<double>(n))
          .backward();
    }
    for (auto* pair : {&net.emb, &net.extra}) {
      const bool is_extra = pair == &net.extra;
      const std::string what =
          std::string(is_extra ? "extra" : "emb") + " gradient at step " + std::to_string(step);
      INFO(what);
      const at::Tensor& g = (*pair)->weight.grad();
      REQUIRE(g.defined());
      REQUIRE(g.is_sparse());
      CHECK(g.device() == dev());
      CHECK(g._indices().device() == dev());
      CHECK(g._values().device() == dev());
      // Every rank's 3 x 2 tokens (only rank 0's for `extra`).
      CHECK(g._nnz() == (is_extra ? 6 : 6 * n));
      const at::Tensor& w = (is_extra ? ref.extra : ref.emb)->weight.grad();
      check_close(g.to_dense(), w, 1e-5, 1e-6, what);
    }
    opt.step();
    rsgd.step();
  }
  check_close(net.emb->weight, ref.emb->weight, 1e-5, 1e-6, "emb table");
  check_close(net.extra->weight, ref.extra->weight, 1e-5, 1e-6, "extra table");
  // Not bit-identical: SGD applies a sparse gradient's repeated rows with atomic adds.
  CHECK(spread_from_root(flat_params(net), "cuda.sparse.identical") <= 1e-6);
}

// ---- broadcasts of modules and optimizer state ------------------------------------------------

TEST_CASE("torch CUDA broadcast_parameters: parameters and buffers come from the root",
          "[torch][cuda][broadcast]") {
  Session s;
  const int r = hvd::rank();
  auto build = [](uint64_t seed) {
    ::torch::manual_seed(seed);
    ::torch::nn::Sequential m(::torch::nn::Linear(4, 6), ::torch::nn::BatchNorm1d(6));
    m->to(dev());
    return m;
  };
  auto x_of = [](int q) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(20 + q));
    return at::randn({8, 4}, gen).to(dev());
  };
  auto m = build(10 + static_cast<uint64_t>(r));
  m->forward(x_of(r));  // rank-dependent running statistics
  auto expected = build(10);
  expected->forward(x_of(0));
  hvd::torch::broadcast_parameters(*m, 0, kTimeout);
  auto params = m->named_parameters();
  auto eparams = expected->named_parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    CHECK(params[i].value().device() == dev());
    check_equal(params[i].value().detach(), eparams[i].value().detach().cpu(),
                "parameter " + params[i].key());
  }
  auto bufs = m->named_buffers();
  auto ebufs = expected->named_buffers();
  REQUIRE(bufs.size() == ebufs.size());
  for (size_t i = 0; i < bufs.size(); ++i) {
    const std::string what = "buffer " + bufs[i].key();
    CHECK(bufs[i].value().device() == dev());
    check_close(bufs[i].value(), ebufs[i].value(), 1e-6, 1e-7, what);  // the root computed it
    CHECK(identical_on_all_ranks(bufs[i].value(), "cuda.bcast_params.identical." + bufs[i].key()));
  }
}

TEST_CASE(
    "torch CUDA broadcast_optimizer_state: Adam state and options come from the root, on this "
    "device",
    "[torch][cuda][broadcast]") {
  Session s;
  const int r = hvd::rank();
  auto root_steps = [](Mlp& m, ::torch::optim::Optimizer& o) {
    for (int k = 0; k < 2; ++k) {
      Batch b = batch_of(0, 70 + k);
      o.zero_grad();
      ::torch::mse_loss(m.forward(b.x), b.y).backward();
      o.step();
    }
  };
  Mlp m(5);
  ::torch::optim::Adam adam(m.parameters(),
                            ::torch::optim::AdamOptions(0.01 * (r + 1)).betas({0.8, 0.99}));
  if (r == 0) root_steps(m, adam);  // only the root has state
  Mlp em(5);
  ::torch::optim::Adam eadam(em.parameters(), ::torch::optim::AdamOptions(0.01).betas({0.8, 0.99}));
  root_steps(em, eadam);

  hvd::torch::broadcast_parameters(m, 0, kTimeout);
  hvd::torch::broadcast_optimizer_state(adam, 0, kTimeout);
  CHECK(adam.param_groups()[0].options().get_lr() == Approx(0.01));
  auto ps = m.parameters();
  auto eps = em.parameters();
  for (size_t i = 0; i < ps.size(); ++i) {
    INFO("parameter " << i);
    auto key = hvd::torch::optimizer_state_key(ps[i]);
    auto ekey = hvd::torch::optimizer_state_key(eps[i]);
    if (eadam.state().count(ekey) == 0) {  // the unused layer: no state anywhere
      CHECK(adam.state().count(key) == 0);
      continue;
    }
    REQUIRE(adam.state().count(key) == 1);
    auto& st = static_cast<::torch::optim::AdamParamState&>(*adam.state()[key]);
    auto& est = static_cast<::torch::optim::AdamParamState&>(*eadam.state()[ekey]);
    CHECK(st.step() == est.step());
    CHECK(st.exp_avg().device() == dev());
    CHECK(st.exp_avg_sq().device() == dev());
    check_close(st.exp_avg(), est.exp_avg(), 1e-5, 1e-8, "exp_avg");
    check_close(st.exp_avg_sq(), est.exp_avg_sq(), 1e-5, 1e-10, "exp_avg_sq");
    CHECK(identical_on_all_ranks(st.exp_avg(), "cuda.bcast_state.exp_avg." + std::to_string(i)));
  }
  // One more step runs on the device (the state is where the parameters are) and matches the
  // local reference.
  Batch b = batch_of(0, 99);
  adam.zero_grad();
  ::torch::mse_loss(m.forward(b.x), b.y).backward();
  adam.step();
  eadam.zero_grad();
  ::torch::mse_loss(em.forward(b.x), b.y).backward();
  eadam.step();
  check_close(flat_params(m), flat_params(em), 1e-5, 1e-7, "parameters after one more step");
}
