// Copyright horovod_cpp authors. Multi-rank tests of the framework-agnostic training API
// (horovod_cpp/training.h). Every expected value is computed on each rank, independently, by a
// single-process reference that trains on the whole batch.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "horovod_cpp/horovod_cpp.h"
#include "horovod_cpp/training.h"

namespace {

using hvd::GradKind;
using hvd::ParameterList;
using hvd::ParameterPtr;

constexpr std::chrono::milliseconds kTimeout(60000);

struct Session {
  Session() { hvd::init(); }
  ~Session() { hvd::shutdown(); }
};

std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// ------------------------------------------------------------------------------------------
// A linear model y = W x + b with mean squared error, gradients computed by hand.

constexpr int kIn = 5, kOut = 3;

struct Data {
  std::vector<float> x;  // [n, kIn]
  std::vector<float> y;  // [n, kOut]
  int n = 0;
};

Data make_data(int n, uint32_t seed) {
  Data d;
  d.n = n;
  d.x = random_vec(static_cast<size_t>(n) * kIn, seed);
  auto noise = random_vec(static_cast<size_t>(n) * kOut, seed + 1, 0.1f);
  auto true_w = random_vec(kOut * kIn, 7);
  d.y.resize(static_cast<size_t>(n) * kOut);
  for (int s = 0; s < n; ++s) {
    for (int o = 0; o < kOut; ++o) {
      float acc = 0.5f * static_cast<float>(o);
      for (int i = 0; i < kIn; ++i) acc += true_w[o * kIn + i] * d.x[s * kIn + i];
      d.y[s * kOut + o] = acc + noise[s * kOut + o];
    }
  }
  return d;
}

// Rows [begin, end) of the data.
Data slice(const Data& d, int begin, int end) {
  Data s;
  s.n = end - begin;
  s.x.assign(d.x.begin() + begin * kIn, d.x.begin() + end * kIn);
  s.y.assign(d.y.begin() + begin * kOut, d.y.begin() + end * kOut);
  return s;
}

struct Linear {
  ParameterPtr w, b;
  explicit Linear(uint32_t seed) {
    w = hvd::make_parameter("linear.weight", {kOut, kIn}, random_vec(kOut * kIn, seed, 0.5f));
    b = hvd::make_parameter("linear.bias", {kOut}, random_vec(kOut, seed + 100, 0.5f));
  }
  ParameterList params() const { return {w, b}; }

  // Adds the gradient of the mean (over d's samples) of 0.5 * ||W x + b - y||^2, scaled by
  // `scale`. Marks b then w ready through `ready` (backward order: the bias comes last here
  // on purpose to make the order differ from the parameter list).
  template <typename Ready>
  void backward(const Data& d, Ready ready, float scale = 1.0f) {
    std::vector<float> gw(kOut * kIn, 0.0f), gb(kOut, 0.0f);
    for (int s = 0; s < d.n; ++s) {
      for (int o = 0; o < kOut; ++o) {
        float pred = b->value()[o];
        for (int i = 0; i < kIn; ++i) pred += w->value()[o * kIn + i] * d.x[s * kIn + i];
        const float err = (pred - d.y[s * kOut + o]) * scale / static_cast<float>(d.n);
        gb[o] += err;
        for (int i = 0; i < kIn; ++i) gw[o * kIn + i] += err * d.x[s * kIn + i];
      }
    }
    // Odd ranks mark the gradients in the other order: collectives are matched by name.
    if (hvd::rank() % 2 == 0) {
      b->add_dense_grad(gb);
      ready(*b);
      w->add_dense_grad(gw);
      ready(*w);
    } else {
      w->add_dense_grad(gw);
      ready(*w);
      b->add_dense_grad(gb);
      ready(*b);
    }
  }
};

void check_close(const std::vector<float>& got, const std::vector<float>& want, double rel, const std::string& what) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]) / (1e-6 + std::fabs(static_cast<double>(want[i])));
    if (err > worst) {
      worst = err;
      at = i;
    }
  }
  INFO(what << ": worst relative error " << worst << " at " << at << " (got " << got[at] << ", want " << want[at]
            << ") on rank " << hvd::rank());
  CHECK(worst <= rel);
}

hvd::DistributedOptions dist_opts() {
  hvd::DistributedOptions o;
  o.timeout = kTimeout;
  return o;
}

// Trains `steps` steps data-parallel (each rank on its 1/size() shard of a batch of 12 per
// step) and the single-process reference on whole batches; returns (distributed, reference)
// weights concatenated.
template <typename MakeOpt>
std::pair<std::vector<float>, std::vector<float>> train_both(MakeOpt make_opt, hvd::DistributedOptions dopts,
                                                             int steps = 5) {
  const int n = hvd::size(), r = hvd::rank();
  const int batch = 12;  // divisible by 1, 2, 3, 4
  // Distributed model: a rank-dependent init, made identical by the broadcast.
  Linear dist(1000 + static_cast<uint32_t>(r));
  hvd::broadcast_parameters(dist.params(), 0, kTimeout);
  auto dopt = std::make_shared<hvd::DistributedOptimizer>(make_opt(dist.params()), dopts);
  // Reference: rank 0's init, computed here.
  Linear ref(1000);
  auto ropt = make_opt(ref.params());
  for (int step = 0; step < steps; ++step) {
    Data whole = make_data(batch, 50 + static_cast<uint32_t>(step));
    Data shard = slice(whole, r * batch / n, (r + 1) * batch / n);
    dopt->zero_grad();
    dist.backward(shard, [&](hvd::Parameter& p) { dopt->mark_ready(p); });
    dopt->step();
    ropt->zero_grad();
    ref.backward(whole, [](hvd::Parameter&) {});
    ropt->step();
  }
  std::vector<float> a = dist.w->value(), b = ref.w->value();
  a.insert(a.end(), dist.b->value().begin(), dist.b->value().end());
  b.insert(b.end(), ref.b->value().begin(), ref.b->value().end());
  return {a, b};
}

// Identical on every rank, bit for bit: compares with rank 0's copy.
bool identical_on_all_ranks(std::vector<float> v, const std::string& name) {
  std::vector<float> root = v;
  hvd::broadcast(name, hvd::TensorView(root.data(), hvd::DataType::kFloat32, {static_cast<int64_t>(root.size())}), 0);
  return root == v;
}

}  // namespace

TEST_CASE("SGD (momentum, weight decay): N ranks on 1/N of the batch == 1 process on all of it", "[training][sgd]") {
  Session s;
  hvd::SGDOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.weight_decay = 0.01;
  auto [dist, ref] = train_both([&](ParameterList p) { return std::make_shared<hvd::SGD>(p, o); }, dist_opts());
  check_close(dist, ref, 1e-4, "SGD weights");
  // Training moved the weights (the comparison is not between two untouched copies).
  Linear init(1000);
  CHECK(std::fabs(dist[0] - init.w->value()[0]) > 1e-3);
  CHECK(identical_on_all_ranks(dist, "test.sgd.identical"));
}

TEST_CASE("Nesterov SGD data-parallel == single process", "[training][sgd]") {
  Session s;
  hvd::SGDOptions o;
  o.lr = 0.05;
  o.momentum = 0.8;
  o.nesterov = true;
  auto [dist, ref] = train_both([&](ParameterList p) { return std::make_shared<hvd::SGD>(p, o); }, dist_opts());
  check_close(dist, ref, 1e-4, "Nesterov SGD weights");
}

TEST_CASE("Adam: N ranks on 1/N of the batch == 1 process on all of it", "[training][adam]") {
  Session s;
  hvd::AdamOptions o;
  o.lr = 0.05;
  o.weight_decay = 0.001;
  auto [dist, ref] = train_both([&](ParameterList p) { return std::make_shared<hvd::Adam>(p, o); }, dist_opts());
  check_close(dist, ref, 1e-4, "Adam weights");
}

TEST_CASE("op Sum: the gradient sum, equal to averaging with lr * size()", "[training][sgd]") {
  Session s;
  hvd::SGDOptions o;
  o.lr = 0.02;
  auto d = dist_opts();
  d.op = hvd::ReduceOp::kSum;
  const int n = hvd::size();
  // Distributed with Sum and lr; the reference averages, so it needs lr * n.
  Linear dist(3);
  auto dopt = std::make_shared<hvd::DistributedOptimizer>(std::make_shared<hvd::SGD>(dist.params(), o), d);
  Linear ref(3);
  hvd::SGDOptions ro = o;
  ro.lr = o.lr * n;
  hvd::SGD ropt(ref.params(), ro);
  Data whole = make_data(12, 9);
  Data shard = slice(whole, hvd::rank() * 12 / n, (hvd::rank() + 1) * 12 / n);
  dist.backward(shard, [&](hvd::Parameter& p) { dopt->mark_ready(p); });
  dopt->step();
  ref.backward(whole, [](hvd::Parameter&) {});
  ropt.step();
  check_close(dist.w->value(), ref.w->value(), 1e-4, "Sum weights");
}

TEST_CASE("gradient_predivide_factor gives the same average", "[training][sgd]") {
  Session s;
  hvd::SGDOptions o;
  o.lr = 0.1;
  auto d = dist_opts();
  d.gradient_predivide_factor = 4.0;
  auto [dist, ref] = train_both([&](ParameterList p) { return std::make_shared<hvd::SGD>(p, o); }, d);
  check_close(dist, ref, 1e-4, "predivided SGD weights");
}

TEST_CASE("broadcast_parameters: every rank holds the root's values", "[training][broadcast]") {
  Session s;
  const int n = hvd::size(), r = hvd::rank();
  for (int root : {0, n - 1}) {
    Linear m(200 + static_cast<uint32_t>(r));
    Linear expected(200 + static_cast<uint32_t>(root));  // computed here, not received
    if (r != root) CHECK(m.w->value() != expected.w->value());  // they did differ before
    hvd::broadcast_parameters(m.params(), root, kTimeout);
    CHECK(m.w->value() == expected.w->value());
    CHECK(m.b->value() == expected.b->value());
  }
}

TEST_CASE("broadcast_optimizer_state: state and hyperparameters come from the root", "[training][broadcast]") {
  Session s;
  const int r = hvd::rank();
  // The root takes 3 local Adam steps; the others are fresh, with another learning rate.
  auto run_root_steps = [](Linear& m, hvd::Adam& opt) {
    for (int k = 0; k < 3; ++k) {
      opt.zero_grad();
      m.backward(make_data(6, 70 + static_cast<uint32_t>(k)), [](hvd::Parameter&) {});
      opt.step();
    }
  };
  Linear m(5);
  hvd::AdamOptions o;
  o.lr = 0.01 * (r + 1);
  hvd::Adam opt(m.params(), o);
  if (r == 0) run_root_steps(m, opt);
  // The expectation, computed locally.
  Linear em(5);
  hvd::AdamOptions eo;
  eo.lr = 0.01;
  hvd::Adam eopt(em.params(), eo);
  run_root_steps(em, eopt);

  hvd::broadcast_parameters(m.params(), 0, kTimeout);
  hvd::broadcast_optimizer_state(opt, 0, kTimeout);
  CHECK(opt.learning_rate() == Approx(0.01));
  auto st = opt.state();
  auto est = eopt.state();
  REQUIRE(st.size() == est.size());
  for (size_t i = 0; i < st.size(); ++i) {
    INFO("state entry " << st[i].name);
    CHECK(st[i].name == est[i].name);
    CHECK(std::memcmp(st[i].view.data, est[i].view.data, static_cast<size_t>(st[i].view.nbytes())) == 0);
  }
  // From here on, one more step stays identical everywhere.
  opt.zero_grad();
  m.backward(make_data(6, 99), [](hvd::Parameter&) {});
  opt.step();
  eopt.zero_grad();
  em.backward(make_data(6, 99), [](hvd::Parameter&) {});
  eopt.step();
  CHECK(m.w->value() == em.w->value());
}

TEST_CASE("checkpoint loaded on rank 0 only, then broadcast", "[training][checkpoint]") {
  Session s;
  const int r = hvd::rank();
  // Rank 0 trains a little and writes a checkpoint (its path is broadcast so all know it).
  hvd::SGDOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  auto train_some = [&](Linear& m, hvd::SGD& opt) {
    for (int k = 0; k < 2; ++k) {
      opt.zero_grad();
      m.backward(make_data(6, 80 + static_cast<uint32_t>(k)), [](hvd::Parameter&) {});
      opt.step();
    }
  };
  char path[64];
  std::snprintf(path, sizeof(path), "/tmp/hvd_ckpt_test_%d.bin", static_cast<int>(getpid()));
  if (r == 0) {
    Linear m(11);
    hvd::SGD opt(m.params(), o);
    train_some(m, opt);
    hvd::save_checkpoint(path, m.params(), &opt);
  }
  // A fresh program: random init everywhere, the checkpoint read by rank 0 only.
  Linear m(300 + static_cast<uint32_t>(r));
  hvd::SGDOptions fresh = o;
  fresh.lr = 0.5;  // overwritten by the checkpoint's hyperparameters on rank 0, then broadcast
  hvd::SGD opt(m.params(), fresh);
  if (r == 0) {
    hvd::load_checkpoint(path, m.params(), &opt);
    std::remove(path);
  }
  hvd::broadcast_parameters(m.params(), 0, kTimeout);
  hvd::broadcast_optimizer_state(opt, 0, kTimeout);
  Linear em(11);
  hvd::SGD eopt(em.params(), o);
  train_some(em, eopt);
  CHECK(m.w->value() == em.w->value());
  CHECK(opt.learning_rate() == Approx(0.1));
  CHECK(std::memcmp(opt.state()[0].view.data, eopt.state()[0].view.data,
                    static_cast<size_t>(opt.state()[0].view.nbytes())) == 0);
  // A missing file is a clear error.
  CHECK_THROWS_WITH(hvd::load_checkpoint("/nonexistent/ckpt.bin", m.params(), nullptr),
                    Catch::Contains("cannot open"));
}

// ------------------------------------------------------------------------------------------
// Sparse gradients: an embedding table whose loss touches a few rows per sample.

namespace {

constexpr int kVocab = 20, kDim = 4;

struct EmbeddingModel {
  ParameterPtr table;
  EmbeddingModel(GradKind kind, uint32_t seed) {
    table = hvd::make_parameter("embedding.weight", {kVocab, kDim}, random_vec(kVocab * kDim, seed, 0.3f), kind);
  }
  // Loss: mean over samples of 0.5 * ||sum_{t in tokens} E[t] - target||^2.
  void backward(const std::vector<std::vector<int64_t>>& tokens, const std::vector<float>& targets) {
    const auto& e = table->value();
    const float inv = 1.0f / static_cast<float>(tokens.size());
    std::vector<int64_t> idx;
    std::vector<float> vals;
    for (size_t s = 0; s < tokens.size(); ++s) {
      std::vector<float> err(kDim, 0.0f);
      for (int64_t t : tokens[s]) {
        for (int j = 0; j < kDim; ++j) err[j] += e[t * kDim + j];
      }
      for (int j = 0; j < kDim; ++j) err[j] = (err[j] - targets[s * kDim + j]) * inv;
      for (int64_t t : tokens[s]) {
        idx.push_back(t);
        vals.insert(vals.end(), err.begin(), err.end());
      }
    }
    if (table->grad_kind() == GradKind::kSparse) {
      table->add_sparse_grad(idx, vals);
    } else {
      std::vector<float> g(kVocab * kDim, 0.0f);
      for (size_t k = 0; k < idx.size(); ++k) {
        for (int j = 0; j < kDim; ++j) g[idx[k] * kDim + j] += vals[k * kDim + j];
      }
      table->add_dense_grad(g);
    }
  }
};

struct EmbBatch {
  std::vector<std::vector<int64_t>> tokens;
  std::vector<float> targets;
};

EmbBatch make_emb_batch(int n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> tok(0, kVocab / 2);  // half the table never touched
  std::uniform_int_distribution<int> len(1, 3);
  EmbBatch b;
  for (int s = 0; s < n; ++s) {
    std::vector<int64_t> t;
    for (int k = len(gen); k > 0; --k) t.push_back(tok(gen));
    b.tokens.push_back(t);
  }
  b.targets = random_vec(static_cast<size_t>(n) * kDim, seed + 5);
  return b;
}

EmbBatch emb_slice(const EmbBatch& b, int begin, int end) {
  EmbBatch s;
  s.tokens.assign(b.tokens.begin() + begin, b.tokens.begin() + end);
  s.targets.assign(b.targets.begin() + begin * kDim, b.targets.begin() + end * kDim);
  return s;
}

// Trains the embedding data-parallel with gradient kind `kind`; returns the table.
template <typename MakeOpt>
std::vector<float> train_embedding(GradKind kind, MakeOpt make_opt, hvd::DistributedOptions d, int64_t* gathered_rows,
                                   int steps = 4) {
  const int n = hvd::size(), r = hvd::rank();
  EmbeddingModel m(kind, 42);
  auto opt = std::make_shared<hvd::DistributedOptimizer>(make_opt(ParameterList{m.table}), d);
  for (int step = 0; step < steps; ++step) {
    EmbBatch whole = make_emb_batch(12, 500 + static_cast<uint32_t>(step));
    EmbBatch shard = emb_slice(whole, r * 12 / n, (r + 1) * 12 / n);
    opt->zero_grad();
    m.backward(shard.tokens, shard.targets);
    opt->mark_ready(*m.table);
    opt->synchronize();
    if (gathered_rows && step == 0) *gathered_rows = static_cast<int64_t>(m.table->sparse_indices().size());
    opt->step();
  }
  return m.table->value();
}

template <typename MakeOpt>
std::vector<float> train_embedding_reference(MakeOpt make_opt, int steps = 4) {
  EmbeddingModel m(GradKind::kDense, 42);
  auto opt = make_opt(ParameterList{m.table});
  for (int step = 0; step < steps; ++step) {
    EmbBatch whole = make_emb_batch(12, 500 + static_cast<uint32_t>(step));
    opt->zero_grad();
    m.backward(whole.tokens, whole.targets);
    opt->step();
  }
  return m.table->value();
}

}  // namespace

TEST_CASE("sparse gradients: allgather path == dense path == single process", "[training][sparse]") {
  Session s;
  const int n = hvd::size(), r = hvd::rank();
  hvd::SGDOptions so;
  so.lr = 0.5;
  auto sgd = [&](ParameterList p) { return std::make_shared<hvd::SGD>(p, so); };
  int64_t gathered = -1;
  auto sparse = train_embedding(GradKind::kSparse, sgd, dist_opts(), &gathered);
  auto dense = train_embedding(GradKind::kDense, sgd, dist_opts(), nullptr);
  auto ref = train_embedding_reference(sgd);
  check_close(sparse, ref, 1e-4, "sparse SGD table");
  check_close(dense, ref, 1e-4, "dense SGD table");
  // The sparse path really gathered rows: the rows of every rank's shard, not the whole table.
  EmbBatch first = make_emb_batch(12, 500);
  int64_t expect_rows = 0;
  for (int k = 0; k < n; ++k) {
    for (auto& t : emb_slice(first, k * 12 / n, (k + 1) * 12 / n).tokens) expect_rows += static_cast<int64_t>(t.size());
  }
  CHECK(gathered == expect_rows);
  // Untouched rows kept their initial values (plain SGD updates only gathered rows).
  EmbeddingModel init(GradKind::kDense, 42);
  CHECK(sparse[(kVocab - 1) * kDim] == init.table->value()[(kVocab - 1) * kDim]);
  (void)r;

  // sparse_as_dense: the same numbers through an allreduce.
  auto d = dist_opts();
  d.sparse_as_dense = true;
  int64_t rows_dense = -1;
  auto as_dense = train_embedding(GradKind::kSparse, sgd, d, &rows_dense);
  check_close(as_dense, ref, 1e-4, "sparse_as_dense table");
  CHECK(rows_dense == kVocab);

  // Adam, which densifies locally (never on the wire).
  hvd::AdamOptions ao;
  ao.lr = 0.05;
  auto adam = [&](ParameterList p) { return std::make_shared<hvd::Adam>(p, ao); };
  check_close(train_embedding(GradKind::kSparse, adam, dist_opts(), nullptr), train_embedding_reference(adam), 1e-4,
              "sparse Adam table");

  // Sum instead of average: values are not scaled.
  auto ds = dist_opts();
  ds.op = hvd::ReduceOp::kSum;
  hvd::SGDOptions so_sum = so;
  so_sum.lr = so.lr / n;
  auto sgd_sum = [&](ParameterList p) { return std::make_shared<hvd::SGD>(p, so_sum); };
  check_close(train_embedding(GradKind::kSparse, sgd_sum, ds, nullptr), ref, 1e-4, "sparse Sum table");
}

TEST_CASE("sparse gradients: ranks without rows contribute nothing", "[training][sparse]") {
  Session s;
  const int n = hvd::size(), r = hvd::rank();
  auto table = hvd::make_parameter("t", {6, 2}, {}, GradKind::kSparse);
  hvd::DistributedOptimizer opt(std::make_shared<hvd::SGD>(ParameterList{table}), dist_opts());
  if (r == 0) table->add_sparse_grad({4, 1}, {1.0f, 2.0f, 3.0f, 4.0f});  // the others: no gradient at all
  opt.synchronize();  // never marked ready: synchronize() starts it
  CHECK(table->sparse_indices() == std::vector<int64_t>{4, 1});
  const float k = 1.0f / static_cast<float>(n);
  CHECK(table->sparse_values() == std::vector<float>{1.0f * k, 2.0f * k, 3.0f * k, 4.0f * k});
  CHECK(table->has_grad());
}

TEST_CASE("backward_passes_per_step=k == one step on k times the batch", "[training][accumulate]") {
  Session s;
  const int n = hvd::size(), r = hvd::rank();
  const int k = 3, micro = 12;  // each pass: a batch of 12 split across ranks
  for (bool average : {true, false}) {
    hvd::SGDOptions o;
    o.lr = 0.1;
    o.momentum = 0.5;
    auto d = dist_opts();
    d.backward_passes_per_step = k;
    d.average_aggregated_gradients = average;
    Linear dist(21);
    auto dopt = std::make_shared<hvd::DistributedOptimizer>(std::make_shared<hvd::SGD>(dist.params(), o), d);
    Linear ref(21);
    hvd::SGD ropt(ref.params(), o);
    for (int step = 0; step < 2; ++step) {
      Data big = make_data(k * micro, 600 + static_cast<uint32_t>(step));
      dopt->zero_grad();
      for (int pass = 0; pass < k; ++pass) {
        Data mb = slice(big, pass * micro, (pass + 1) * micro);
        Data shard = slice(mb, r * micro / n, (r + 1) * micro / n);
        // Without averaging the accumulated sum, scale each pass's loss by 1/k instead.
        dist.backward(shard, [&](hvd::Parameter& p) { dopt->mark_ready(p); }, average ? 1.0f : 1.0f / k);
      }
      dopt->step();
      ropt.zero_grad();
      ref.backward(big, [](hvd::Parameter&) {});
      ropt.step();
    }
    INFO("average_aggregated_gradients=" << average);
    check_close(dist.w->value(), ref.w->value(), 1e-4, "accumulated weights");
    check_close(dist.b->value(), ref.b->value(), 1e-4, "accumulated bias");
  }
  // Marking a parameter ready more than k times before step() is a clear error.
  auto d = dist_opts();
  d.backward_passes_per_step = 1;
  Linear m(1);
  hvd::DistributedOptimizer opt(std::make_shared<hvd::SGD>(m.params()), d);
  opt.mark_ready(*m.w);
  CHECK_THROWS_WITH(opt.mark_ready(*m.w), Catch::Contains("more than backward_passes_per_step"));
  opt.step();  // completes the started reduction on every rank
}

TEST_CASE("fp16 compression stays within fp16 tolerance", "[training][compression]") {
  Session s;
  hvd::SGDOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  auto d = dist_opts();
  d.compression = hvd::Compression::kFP16;
  auto [dist, ref] = train_both([&](ParameterList p) { return std::make_shared<hvd::SGD>(p, o); }, d);
  // fp16 keeps 11 significant bits (relative 2^-11 ~ 4.9e-4 per rounding); a few steps of
  // accumulated rounding stay well within 1e-2 relative, and every rank agrees exactly.
  check_close(dist, ref, 1e-2, "fp16-compressed SGD weights");
  CHECK(identical_on_all_ranks(dist, "test.fp16.identical"));
}

TEST_CASE("float16 conversion", "[training][compression]") {
  CHECK(hvd::float_to_half(1.0f) == 0x3C00);
  CHECK(hvd::float_to_half(-2.0f) == 0xC000);
  CHECK(hvd::float_to_half(65504.0f) == 0x7BFF);
  CHECK(hvd::float_to_half(1e6f) == 0x7C00);
  CHECK(hvd::float_to_half(1e-9f) == 0x0000);
  CHECK(hvd::half_to_float(0x0001) == Approx(5.960464477539063e-08));
  CHECK(hvd::half_to_float(0x3555) == Approx(0.333251953125));
  auto v = random_vec(10000, 3, 100.0f);
  double worst = 0;
  for (float x : v) {
    const float y = hvd::half_to_float(hvd::float_to_half(x));
    if (std::fabs(x) > 1e-4) worst = std::max(worst, std::fabs((y - x) / static_cast<double>(x)));
  }
  CHECK(worst <= 1.0 / 2048 + 1e-9);
  CHECK(worst > 0);
}
