// Copyright horovod_cpp authors. Multi-rank tests of the LibTorch adapter on CUDA tensors:
// DistributedOptimizer (data-parallel training against a local reference), sparse gradients,
// and the broadcasts of modules and optimizer state. Built into the executable of
// test_torch_cuda.cc, whose listener skips every test without a usable device on every rank.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "horovod_cpp/torch.h"
#include "torch_cuda_test_util.h"

using namespace hvdtorchcudatest;  // NOLINT(google-build-using-namespace): test helpers

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
