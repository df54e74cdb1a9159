// Copyright horovod_cpp authors. Multi-rank tests of the semi-synchronous modes of the LibTorch
// adapter (bounded staleness, local SGD) and of hvd::torch::StepGuard. The expected weights are
// computed on each rank by simulating every rank with plain LibTorch.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <deque>
#include <string>
#include <vector>

#include "horovod_cpp/torch.h"
#include "torch_test_util.h"

namespace {

constexpr std::chrono::milliseconds kTimeout(60000);

using hvdtorchtest::Session;

::torch::nn::Sequential model() {
  ::torch::manual_seed(11);
  auto m = ::torch::nn::Sequential(::torch::nn::Linear(4, 6), ::torch::nn::Tanh(), ::torch::nn::Linear(6, 2));
  m->to(at::kDouble);
  return m;
}

// Rank r's batch at step t.
std::pair<at::Tensor, at::Tensor> batch(int r, int64_t t) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(100 * r + t + 1));
  return {at::randn({4, 4}, gen, at::kDouble), at::randn({4, 2}, gen, at::kDouble)};
}

std::vector<at::Tensor> grads_at(::torch::nn::Sequential& m, int r, int64_t t) {
  for (auto& p : m->parameters()) p.mutable_grad() = at::Tensor();
  auto [x, y] = batch(r, t);
  ::torch::mse_loss(m->forward(x), y).backward();
  std::vector<at::Tensor> g;
  for (auto& p : m->parameters()) g.push_back(p.grad().clone());
  return g;
}

at::Tensor flat(::torch::nn::Sequential& m) {
  std::vector<at::Tensor> v;
  for (auto& p : m->parameters()) v.push_back(p.detach().reshape({-1}));
  return ::torch::cat(v);
}

bool identical_everywhere(const at::Tensor& t) {
  at::Tensor root = t.clone();
  hvd::broadcast("ts.identical", hvd::torch::view(root), 0);
  std::vector<int32_t> differ{::torch::equal(root, t) ? 0 : 1};
  hvd::AllreduceOptions o;
  o.op = hvd::ReduceOp::kSum;
  hvd::allreduce("ts.differ", hvd::TensorView(differ.data(), hvd::DataType::kInt32, {1}), o);
  return differ[0] == 0;
}

// Trains `steps` steps of this rank's data with the given options.
at::Tensor train(const hvd::DistributedOptions& o, int steps, bool flush) {
  auto m = model();
  ::torch::optim::SGD sgd(m->parameters(), ::torch::optim::SGDOptions(0.2).momentum(0.9));
  hvd::torch::DistributedOptimizer opt(sgd, *m, o);
  for (int t = 0; t < steps; ++t) {
    opt.zero_grad();
    auto [x, y] = batch(hvd::rank(), t);
    ::torch::mse_loss(m->forward(x), y).backward();
    opt.step();
  }
  if (flush) opt.flush();
  CHECK(opt.steps_taken() == steps);
  return flat(m);
}

at::Tensor reference_stale(int s, int steps, bool flush) {
  auto m = model();
  ::torch::optim::SGD sgd(m->parameters(), ::torch::optim::SGDOptions(0.2).momentum(0.9));
  std::deque<std::vector<at::Tensor>> queue;
  auto apply = [&]() {
    auto params = m->parameters();
    for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = queue.front()[i];
    queue.pop_front();
    sgd.step();
  };
  for (int t = 0; t < steps; ++t) {
    std::vector<at::Tensor> mean;
    for (int r = 0; r < hvd::size(); ++r) {
      auto g = grads_at(m, r, t);
      if (mean.empty()) {
        mean = g;
      } else {
        for (size_t i = 0; i < g.size(); ++i) mean[i] = mean[i] + g[i];
      }
    }
    for (auto& g : mean) g = g / hvd::size();
    queue.push_back(mean);
    if (static_cast<int>(queue.size()) > s) apply();
  }
  while (flush && !queue.empty()) apply();
  return flat(m);
}

at::Tensor reference_local(int k, int warmup, int steps, bool avg_state) {
  const int n = hvd::size();
  std::vector<::torch::nn::Sequential> ms;
  std::vector<std::unique_ptr<::torch::optim::SGD>> os;
  for (int r = 0; r < n; ++r) {
    ms.push_back(model());
    os.push_back(std::make_unique<::torch::optim::SGD>(ms.back()->parameters(),
                                                        ::torch::optim::SGDOptions(0.2).momentum(0.9)));
  }
  for (int t = 0; t < steps; ++t) {
    std::vector<std::vector<at::Tensor>> g(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) g[static_cast<size_t>(r)] = grads_at(ms[static_cast<size_t>(r)], r, t);
    if (t < warmup) {
      for (size_t i = 0; i < g[0].size(); ++i) {
        at::Tensor mean = g[0][i];
        for (int r = 1; r < n; ++r) mean = mean + g[static_cast<size_t>(r)][i];
        for (int r = 0; r < n; ++r) g[static_cast<size_t>(r)][i] = mean / n;
      }
    }
    for (int r = 0; r < n; ++r) {
      auto params = ms[static_cast<size_t>(r)]->parameters();
      for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = g[static_cast<size_t>(r)][i];
      os[static_cast<size_t>(r)]->step();
    }
    if (t >= warmup && (t + 1 - warmup) % k == 0) {
      ::torch::NoGradGuard ng;
      const size_t np = ms[0]->parameters().size();
      for (size_t i = 0; i < np; ++i) {
        at::Tensor mean = ms[0]->parameters()[i].detach().clone();
        for (int r = 1; r < n; ++r) mean += ms[static_cast<size_t>(r)]->parameters()[i];
        mean /= n;
        for (int r = 0; r < n; ++r) ms[static_cast<size_t>(r)]->parameters()[i].copy_(mean);
        if (avg_state) {
          auto buf = [&](int r) -> at::Tensor {
            auto& st = os[static_cast<size_t>(r)]->state();
            auto key = hvd::torch::optimizer_state_key(ms[static_cast<size_t>(r)]->parameters()[i]);
            return static_cast<::torch::optim::SGDParamState&>(*st.at(key)).momentum_buffer();
          };
          at::Tensor mb = buf(0).clone();
          for (int r = 1; r < n; ++r) mb += buf(r);
          mb /= n;
          for (int r = 0; r < n; ++r) buf(r).copy_(mb);
        }
      }
    }
  }
  return flat(ms[static_cast<size_t>(hvd::rank())]);
}

void check_close(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  INFO(what << " on rank " << hvd::rank() << ": max difference "
            << (got - want).abs().max().item<double>());
  CHECK(::torch::allclose(got, want, 1e-9, 1e-9));
}

}  // namespace

TEST_CASE("LibTorch staleness: the average of step t - s applied at step t, identical on every rank",
          "[torch][semisync]") {
  Session session;
  for (int s : {0, 1, 3}) {
    hvd::DistributedOptions o;
    o.staleness = s;
    o.timeout = kTimeout;
    o.name_prefix = "stale" + std::to_string(s);
    for (bool flush : {false, true}) {
      at::Tensor got = train(o, 10, flush);
      CHECK(identical_everywhere(got));
      check_close(got, reference_stale(s, 10, flush), "staleness " + std::to_string(s));
    }
  }
}

TEST_CASE("LibTorch local SGD: periodic averaging, warmup, state averaging", "[torch][semisync]") {
  Session session;
  struct Case {
    int k, warmup;
    bool state;
  };
  for (Case c : {Case{2, 0, false}, Case{3, 2, true}}) {
    hvd::DistributedOptions o;
    o.local_sgd_period = c.k;
    o.local_sgd_warmup_steps = c.warmup;
    o.local_sgd_average_state = c.state;
    o.timeout = kTimeout;
    const int steps = c.warmup + 2 * c.k;
    at::Tensor got = train(o, steps, false);
    CHECK(identical_everywhere(got));
    check_close(got, reference_local(c.k, c.warmup, steps, c.state), "local SGD k=" + std::to_string(c.k));
    o.local_sgd_overlap = true;
    CHECK(identical_everywhere(train(o, steps + 1, true)));  // flush(): identical
  }
}

TEST_CASE("LibTorch semi-synchronous options validated; StepGuard with uneven ranks", "[torch][semisync]") {
  Session session;
  auto m = model();
  ::torch::optim::SGD sgd(m->parameters(), ::torch::optim::SGDOptions(0.1));
  hvd::DistributedOptions both;
  both.staleness = 1;
  both.local_sgd_period = 2;
  CHECK_THROWS_AS(hvd::torch::DistributedOptimizer(sgd, *m, both), hvd::InvalidArgumentError);
  hvd::DistributedOptions st;
  st.staleness = 2;
  hvd::torch::DistributedOptimizer opt(sgd, *m, st);
  CHECK_THROWS_AS(opt.synchronize(), hvd::InvalidArgumentError);

  hvd::torch::StepGuard guard(1, "torch.guard", kTimeout);
  const int steps = 3 + 2 * hvd::rank();
  for (int t = 0; t < steps; ++t) CHECK(guard.step() == t);
  CHECK(guard.finish() == hvd::size() - 1);
}
