// Copyright horovod_cpp authors. Multi-rank tests of the LibTorch adapter (horovod_cpp/torch.h).
// Every expected value is computed on each rank by a single-process LibTorch reference that
// trains on the whole batch.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "horovod_cpp/torch.h"
#include "torch_test_util.h"

namespace {

constexpr std::chrono::milliseconds kTimeout(60000);

using hvdtorchtest::Session;

hvd::DistributedOptions dist_opts() { return hvdtorchtest::dist_opts_with(kTimeout); }

// A small MLP whose initial weights depend on `seed` only.
::torch::nn::Sequential make_mlp(uint64_t seed) {
  ::torch::manual_seed(seed);
  return ::torch::nn::Sequential(::torch::nn::Linear(5, 8), ::torch::nn::Tanh(), ::torch::nn::Linear(8, 3));
}

struct Batch {
  at::Tensor x, y;
};

Batch make_batch(int64_t n, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  Batch b;
  b.x = at::randn({n, 5}, gen);
  b.y = at::randn({n, 3}, gen);
  return b;
}

Batch shard_of(const Batch& b) {
  const int64_t n = b.x.size(0), r = hvd::rank(), s = hvd::size();
  return {b.x.slice(0, r * n / s, (r + 1) * n / s), b.y.slice(0, r * n / s, (r + 1) * n / s)};
}

at::Tensor flat_params(const ::torch::nn::Module& m) {
  std::vector<at::Tensor> v;
  for (const auto& p : m.parameters()) v.push_back(p.detach().reshape({-1}));
  return ::torch::cat(v);
}

void check_close(const at::Tensor& got, const at::Tensor& want, double rtol, double atol, const std::string& what) {
  const double err = (got - want).abs().max().item<double>();
  const double scale = want.abs().max().item<double>();
  INFO(what << ": max abs difference " << err << " (max |value| " << scale << ") on rank " << hvd::rank());
  CHECK(err <= atol + rtol * scale);
}

bool identical_on_all_ranks(const at::Tensor& t, const std::string& name) {
  at::Tensor root = t.clone().contiguous();
  hvd::broadcast(name, hvd::torch::view(root), 0);
  return ::torch::equal(root, t);
}

// Trains `steps` steps data-parallel (each rank on its shard of a batch of 12) and the
// single-process reference on the whole batches; returns (distributed, reference) weights.
template <typename MakeOpt>
std::pair<at::Tensor, at::Tensor> train_both(MakeOpt make_opt, hvd::DistributedOptions d, int steps = 4) {
  auto dist = make_mlp(1000 + static_cast<uint64_t>(hvd::rank()));
  hvd::torch::broadcast_parameters(*dist, 0, kTimeout);
  auto inner = make_opt(dist->parameters());
  hvd::torch::DistributedOptimizer opt(*inner, *dist, d);
  auto ref = make_mlp(1000);
  auto ropt = make_opt(ref->parameters());
  for (int step = 0; step < steps; ++step) {
    Batch whole = make_batch(12, 50 + static_cast<uint64_t>(step));
    Batch mine = shard_of(whole);
    opt.zero_grad();
    ::torch::mse_loss(dist->forward(mine.x), mine.y).backward();
    opt.step();
    ropt->zero_grad();
    ::torch::mse_loss(ref->forward(whole.x), whole.y).backward();
    ropt->step();
  }
  return {flat_params(*dist), flat_params(*ref)};
}

}  // namespace

TEST_CASE("torch SGD: N ranks on 1/N of the batch == 1 process on all of it", "[torch][sgd]") {
  Session s;
  auto make = [](std::vector<at::Tensor> p) {
    return std::make_unique<::torch::optim::SGD>(p, ::torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(0.01));
  };
  auto [dist, ref] = train_both(make, dist_opts());
  check_close(dist, ref, 1e-5, 1e-6, "SGD weights");
  CHECK((dist - flat_params(*make_mlp(1000))).abs().max().item<double>() > 1e-3);  // training moved them
  CHECK(identical_on_all_ranks(dist, "torch.sgd.identical"));
}

TEST_CASE("torch Adam: N ranks on 1/N of the batch == 1 process on all of it", "[torch][adam]") {
  Session s;
  auto make = [](std::vector<at::Tensor> p) {
    return std::make_unique<::torch::optim::Adam>(p, ::torch::optim::AdamOptions(0.01));
  };
  auto [dist, ref] = train_both(make, dist_opts());
  check_close(dist, ref, 1e-4, 1e-5, "Adam weights");
}

TEST_CASE("torch: the hooks start every reduction during backward", "[torch][hooks]") {
  Session s;
  auto m = make_mlp(1);
  ::torch::optim::SGD sgd(m->parameters(), ::torch::optim::SGDOptions(0.1));
  hvd::torch::DistributedOptimizer opt(sgd, *m, dist_opts());
  Batch b = shard_of(make_batch(12, 3));
  opt.zero_grad();
  CHECK(opt.in_flight() == 0);
  ::torch::mse_loss(m->forward(b.x), b.y).backward();
  CHECK(opt.in_flight() == m->parameters().size());  // all started before step()
  opt.step();
  CHECK(opt.in_flight() == 0);
}

TEST_CASE("torch broadcast_parameters: parameters and buffers come from the root", "[torch][broadcast]") {
  Session s;
  const int r = hvd::rank();
  auto build = [](uint64_t seed) {
    ::torch::manual_seed(seed);
    return ::torch::nn::Sequential(::torch::nn::Linear(4, 6), ::torch::nn::BatchNorm1d(6));
  };
  auto m = build(10 + static_cast<uint64_t>(r));
  m->forward(make_batch(8, 20 + static_cast<uint64_t>(r)).x.slice(1, 0, 4));  // rank-dependent running stats
  auto expected = build(10);
  expected->forward(make_batch(8, 20).x.slice(1, 0, 4));
  if (r != 0) CHECK_FALSE(::torch::equal(flat_params(*m), flat_params(*expected)));
  hvd::torch::broadcast_parameters(*m, 0, kTimeout);
  CHECK(::torch::equal(flat_params(*m), flat_params(*expected)));
  auto bufs = m->named_buffers();
  auto ebufs = expected->named_buffers();
  REQUIRE(bufs.size() == ebufs.size());
  for (size_t i = 0; i < bufs.size(); ++i) {
    INFO("buffer " << bufs[i].key());
    CHECK(::torch::equal(bufs[i].value(), ebufs[i].value()));
  }
}

TEST_CASE("torch broadcast_optimizer_state: state and options come from the root", "[torch][broadcast]") {
  Session s;
  const int r = hvd::rank();
  auto root_steps = [](::torch::nn::Sequential& m, ::torch::optim::Optimizer& o) {
    for (int k = 0; k < 2; ++k) {
      Batch b = make_batch(6, 70 + static_cast<uint64_t>(k));
      o.zero_grad();
      ::torch::mse_loss(m->forward(b.x), b.y).backward();
      o.step();
    }
  };
  auto m = make_mlp(5);
  ::torch::optim::Adam adam(m->parameters(), ::torch::optim::AdamOptions(0.01 * (r + 1)).betas({0.8, 0.99}));
  if (r == 0) root_steps(m, adam);  // only the root has state
  auto em = make_mlp(5);
  ::torch::optim::Adam eadam(em->parameters(), ::torch::optim::AdamOptions(0.01).betas({0.8, 0.99}));
  root_steps(em, eadam);

  hvd::torch::broadcast_parameters(*m, 0, kTimeout);
  hvd::torch::broadcast_optimizer_state(adam, 0, kTimeout);
  CHECK(adam.param_groups()[0].options().get_lr() == Approx(0.01));
  auto ps = m->parameters();
  auto eps = em->parameters();
  for (size_t i = 0; i < ps.size(); ++i) {
    auto key = hvd::torch::optimizer_state_key(ps[i]);
    auto ekey = hvd::torch::optimizer_state_key(eps[i]);
    REQUIRE(adam.state().count(key) == 1);
    auto& st = static_cast<::torch::optim::AdamParamState&>(*adam.state()[key]);
    auto& est = static_cast<::torch::optim::AdamParamState&>(*eadam.state()[ekey]);
    CHECK(st.step() == est.step());
    CHECK(::torch::equal(st.exp_avg(), est.exp_avg()));
    CHECK(::torch::equal(st.exp_avg_sq(), est.exp_avg_sq()));
  }
  // One more step stays identical to the local expectation on every rank.
  Batch b = make_batch(6, 99);
  adam.zero_grad();
  ::torch::mse_loss(m->forward(b.x), b.y).backward();
  adam.step();
  eadam.zero_grad();
  ::torch::mse_loss(em->forward(b.x), b.y).backward();
  eadam.step();
  CHECK(::torch::equal(flat_params(*m), flat_params(*em)));
}

namespace {

constexpr int64_t kVocab = 20, kDim = 4;

struct EmbNet : ::torch::nn::Module {
  ::torch::nn::Embedding emb{nullptr};
  EmbNet(bool sparse, uint64_t seed) {
    ::torch::manual_seed(seed);
    emb = register_module("emb", ::torch::nn::Embedding(::torch::nn::EmbeddingOptions(kVocab, kDim).sparse(sparse)));
  }
  // tokens: [n, 2] -> sum of the two rows
  at::Tensor forward(const at::Tensor& tokens) { return emb->forward(tokens).sum(1); }
};

struct EmbBatch {
  at::Tensor tokens, targets;
};

EmbBatch make_emb_batch(int64_t n, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return {at::randint(0, kVocab / 2, {n, 2}, gen, at::kLong), at::randn({n, kDim}, gen)};
}

// Returns the table after training; *rows receives the gathered gradient's nnz at step 0.
at::Tensor train_emb(bool sparse, hvd::DistributedOptions d, int64_t* rows, bool* was_sparse) {
  EmbNet net(sparse, 42);
  ::torch::optim::SGD sgd(net.parameters(), ::torch::optim::SGDOptions(0.5));
  hvd::torch::DistributedOptimizer opt(sgd, net, d);
  for (int step = 0; step < 3; ++step) {
    EmbBatch whole = make_emb_batch(12, 500 + static_cast<uint64_t>(step));
    const int64_t r = hvd::rank(), n = hvd::size();
    auto tok = whole.tokens.slice(0, r * 12 / n, (r + 1) * 12 / n);
    auto tgt = whole.targets.slice(0, r * 12 / n, (r + 1) * 12 / n);
    opt.zero_grad();
    ::torch::mse_loss(net.forward(tok), tgt).backward();
    opt.synchronize();
    if (step == 0 && rows) *rows = net.emb->weight.grad().is_sparse() ? net.emb->weight.grad()._nnz() : -1;
    if (step == 0 && was_sparse) *was_sparse = net.emb->weight.grad().is_sparse();
    opt.step();
  }
  return net.emb->weight.detach().clone();
}

}  // namespace

TEST_CASE("torch sparse Embedding: allgather path == dense path == single process", "[torch][sparse]") {
  Session s;
  int64_t rows = -2;
  bool was_sparse = false;
  at::Tensor sparse = train_emb(true, dist_opts(), &rows, &was_sparse);
  at::Tensor dense = train_emb(false, dist_opts(), nullptr, nullptr);
  EmbNet ref(false, 42);
  ::torch::optim::SGD rsgd(ref.parameters(), ::torch::optim::SGDOptions(0.5));
  for (int step = 0; step < 3; ++step) {
    EmbBatch whole = make_emb_batch(12, 500 + static_cast<uint64_t>(step));
    rsgd.zero_grad();
    ::torch::mse_loss(ref.forward(whole.tokens), whole.targets).backward();
    rsgd.step();
  }
  at::Tensor want = ref.emb->weight.detach();
  check_close(sparse, want, 1e-5, 1e-6, "sparse table");
  check_close(dense, want, 1e-5, 1e-6, "dense table");
  // The gradient stayed sparse and holds the rows of every rank's shard (12 samples x 2 tokens).
  CHECK(was_sparse);
  CHECK(rows == 24);
  // Untouched rows (tokens are < kVocab/2) did not move.
  EmbNet init(true, 42);
  CHECK(::torch::equal(sparse.slice(0, kVocab / 2), init.emb->weight.detach().slice(0, kVocab / 2)));

  auto d = dist_opts();
  d.sparse_as_dense = true;
  at::Tensor as_dense = train_emb(true, d, &rows, &was_sparse);
  check_close(as_dense, want, 1e-5, 1e-6, "sparse_as_dense table");
  CHECK_FALSE(was_sparse);
}

TEST_CASE("torch backward_passes_per_step=k == one step on k times the batch", "[torch][accumulate]") {
  Session s;
  const int k = 3;
  auto d = dist_opts();
  d.backward_passes_per_step = k;
  d.average_aggregated_gradients = true;
  auto dist = make_mlp(7);
  ::torch::optim::SGD sgd(dist->parameters(), ::torch::optim::SGDOptions(0.1).momentum(0.5));
  hvd::torch::DistributedOptimizer opt(sgd, *dist, d);
  auto ref = make_mlp(7);
  ::torch::optim::SGD rsgd(ref->parameters(), ::torch::optim::SGDOptions(0.1).momentum(0.5));
  for (int step = 0; step < 2; ++step) {
    Batch big = make_batch(12 * k, 600 + static_cast<uint64_t>(step));
    opt.zero_grad();
    for (int pass = 0; pass < k; ++pass) {
      Batch mb{big.x.slice(0, pass * 12, (pass + 1) * 12), big.y.slice(0, pass * 12, (pass + 1) * 12)};
      Batch mine = shard_of(mb);
      ::torch::mse_loss(dist->forward(mine.x), mine.y).backward();
      CHECK(opt.in_flight() == (pass == k - 1 ? dist->parameters().size() : 0u));
    }
    opt.step();
    rsgd.zero_grad();
    ::torch::mse_loss(ref->forward(big.x), big.y).backward();
    rsgd.step();
  }
  check_close(flat_params(*dist), flat_params(*ref), 1e-5, 1e-6, "accumulated weights");
}

TEST_CASE("torch fp16 compression stays within fp16 tolerance", "[torch][compression]") {
  Session s;
  auto d = dist_opts();
  d.compression = hvd::Compression::kFP16;
  auto make = [](std::vector<at::Tensor> p) {
    return std::make_unique<::torch::optim::SGD>(p, ::torch::optim::SGDOptions(0.1).momentum(0.9));
  };
  auto [dist, ref] = train_both(make, d);
  check_close(dist, ref, 1e-2, 1e-3, "fp16-compressed SGD weights");
  CHECK(dist.scalar_type() == at::kFloat);
  CHECK(identical_on_all_ranks(dist, "torch.fp16.identical"));
}

TEST_CASE("torch mismatched parameter names fail clearly on every rank", "[torch][errors]") {
  Session s;
  auto m = make_mlp(1);
  ::torch::optim::SGD sgd(m->parameters(), ::torch::optim::SGDOptions(0.1));
  ::torch::OrderedDict<std::string, at::Tensor> named;
  for (const auto& item : m->named_parameters()) {
    std::string name = item.key();
    if (hvd::rank() == 1 && name == "2.bias") name = "2.bias_renamed";
    named.insert(name, item.value());
  }
  std::string msg;
  try {
    hvd::torch::DistributedOptimizer opt(sgd, named, dist_opts());
  } catch (const hvd::MismatchError& e) {
    msg = e.what();
  }
  INFO(msg);
  CHECK(msg.find("2.bias") != std::string::npos);
  CHECK(msg.find("rank 1") != std::string::npos);
  // Parameters of the optimizer missing from the names: a local, clear error.
  ::torch::OrderedDict<std::string, at::Tensor> partial;
  partial.insert("only", m->parameters()[0]);
  CHECK_THROWS_WITH(hvd::torch::DistributedOptimizer(sgd, partial, dist_opts()), Catch::Contains("has no name"));
}

TEST_CASE("torch frozen parameters are not reduced or stepped", "[torch][hooks]") {
  Session s;
  auto m = make_mlp(3);
  auto frozen = m->parameters()[0];  // the first layer's weight
  frozen.requires_grad_(false);
  const at::Tensor before = frozen.detach().clone();
  ::torch::optim::SGD sgd(m->parameters(), ::torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(0.1));
  hvd::torch::DistributedOptimizer opt(sgd, *m, dist_opts());
  Batch b = shard_of(make_batch(12, 4));
  opt.zero_grad();
  ::torch::mse_loss(m->forward(b.x), b.y).backward();
  CHECK(opt.in_flight() == m->parameters().size() - 1);
  opt.step();
  CHECK_FALSE(frozen.grad().defined());
  CHECK(::torch::equal(frozen.detach(), before));
  CHECK(identical_on_all_ranks(flat_params(*m), "torch.frozen.identical"));
}

TEST_CASE("torch to_torch: an allgather's result without a copy, alive after the library's tensor", "[torch][to_torch]") {
  Session s;
  const int r = hvd::rank(), n = hvd::size();
  // Small (new[]) and large (the buffer cache, written past the cache) results; rank r
  // contributes r + 2 rows of `cols` floats, row i of rank r holding 1000 r + i in every column.
  for (const int64_t cols : {int64_t{3}, int64_t{1} << 18}) {
    INFO("columns " << cols << ", rank " << r);
    at::Tensor mine = at::empty({r + 2, cols}, at::kFloat);
    for (int64_t i = 0; i < r + 2; ++i) mine[i].fill_(static_cast<float>(1000 * r + i));
    hvd::Tensor result = hvd::allgather("to_torch." + std::to_string(cols), hvd::torch::view(mine));
    at::Tensor got = hvd::torch::to_torch(result);
    CHECK(got.data_ptr() == result.data());  // shared, not copied
    result = hvd::Tensor();                  // the torch tensor alone keeps the memory now
    int64_t rows = 0;
    for (int q = 0; q < n; ++q) rows += q + 2;
    REQUIRE(got.sizes() == at::IntArrayRef({rows, cols}));
    at::Tensor want = at::empty({rows, cols}, at::kFloat);
    int64_t row = 0;
    for (int q = 0; q < n; ++q) {
      for (int64_t i = 0; i < q + 2; ++i) want[row++].fill_(static_cast<float>(1000 * q + i));
    }
    CHECK(::torch::equal(got, want));
    got.add_(1);  // writable, like any result
    CHECK(::torch::equal(got, want + 1));
  }
}
