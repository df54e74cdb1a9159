// Copyright horovod_cpp authors. An embedding model trained data-parallel with sparse
// gradients (horovod_cpp/training.h): only the embedding rows a batch touches travel between
// ranks, through allgather, instead of the whole table.
//
//   mpirun -np 2 ./sparse_embedding
//
// The task: classify synthetic "documents" of 8 tokens from a 5,000-word vocabulary into 4
// topics. Each topic has 50 words of its own; the rest of a document is noise words. The model
// is a bag of embeddings (mean of the token rows of a 5,000 x 16 table, whose gradient is
// sparse) followed by a dense linear layer. Exits non-zero if the test accuracy is below 90%.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "horovod_cpp/horovod_cpp.h"
#include "horovod_cpp/training.h"

namespace {

constexpr int kVocab = 5000, kDim = 16, kClasses = 4, kTopicWords = 50, kDocLen = 8;

struct Doc {
  std::vector<int64_t> tokens;
  int label;
};

std::vector<Doc> make_docs(int n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> label(0, kClasses - 1), topic(0, kTopicWords - 1);
  std::uniform_int_distribution<int> noise(kClasses * kTopicWords, kVocab - 1);
  std::vector<Doc> docs(static_cast<size_t>(n));
  for (auto& d : docs) {
    d.label = label(gen);
    for (int k = 0; k < kDocLen; ++k) {
      d.tokens.push_back(k < 3 ? d.label * kTopicWords + topic(gen) : noise(gen));
    }
  }
  return docs;
}

struct Model {
  hvd::ParameterPtr emb, w, c;
  Model() {
    std::mt19937 gen(7 + hvd::rank());  // rank-dependent: broadcast_parameters fixes it
    std::normal_distribution<float> dist(0.0f, 0.1f);
    std::vector<float> e(kVocab * kDim), wv(kClasses * kDim);
    for (auto& x : e) x = dist(gen);
    for (auto& x : wv) x = dist(gen);
    emb = hvd::make_parameter("embedding.weight", {kVocab, kDim}, e, hvd::GradKind::kSparse);
    w = hvd::make_parameter("fc.weight", {kClasses, kDim}, wv);
    c = hvd::make_parameter("fc.bias", {kClasses});
  }
  hvd::ParameterList params() const { return {emb, w, c}; }

  // Mean of the token rows.
  std::vector<float> embed(const Doc& d) const {
    std::vector<float> h(kDim, 0.0f);
    for (int64_t t : d.tokens) {
      for (int j = 0; j < kDim; ++j) h[j] += emb->value()[t * kDim + j] / kDocLen;
    }
    return h;
  }
  std::vector<float> logits(const std::vector<float>& h) const {
    std::vector<float> z(kClasses);
    for (int k = 0; k < kClasses; ++k) {
      z[k] = c->value()[k];
      for (int j = 0; j < kDim; ++j) z[k] += w->value()[k * kDim + j] * h[j];
    }
    return z;
  }
};

}  // namespace

int main() {
  hvd::init();
  const int rank = hvd::rank(), size = hvd::size();
  const int per_rank = 4096 / size;  // a fixed global dataset size, sharded
  std::vector<Doc> train = make_docs(per_rank, 100 + static_cast<uint32_t>(rank));
  std::vector<Doc> test = make_docs(1000, 999);

  Model m;
  hvd::broadcast_parameters(m.params(), 0);
  hvd::SGDOptions so;
  so.lr = 2.0;  // plain SGD: sparse rows are updated row by row
  hvd::DistributedOptimizer opt(std::make_shared<hvd::SGD>(m.params(), so));

  const int batch = 32, epochs = 6;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    double loss_sum = 0;
    int64_t rows_sent = 0, steps = 0;
    for (size_t start = 0; start + batch <= train.size(); start += batch) {
      opt.zero_grad();
      std::vector<float> gw(kClasses * kDim, 0.0f), gc(kClasses, 0.0f);
      std::vector<int64_t> idx;
      std::vector<float> rows;
      for (size_t s = start; s < start + batch; ++s) {
        const Doc& d = train[s];
        auto h = m.embed(d);
        auto z = m.logits(h);
        const float zmax = *std::max_element(z.begin(), z.end());
        float sum = 0;
        for (auto& v : z) sum += (v = std::exp(v - zmax));
        loss_sum += -std::log(z[d.label] / sum);
        std::vector<float> dh(kDim, 0.0f);
        for (int k = 0; k < kClasses; ++k) {
          const float dz = (z[k] / sum - (k == d.label ? 1.0f : 0.0f)) / batch;
          gc[k] += dz;
          for (int j = 0; j < kDim; ++j) {
            gw[k * kDim + j] += dz * h[j];
            dh[j] += dz * m.w->value()[k * kDim + j];
          }
        }
        for (int64_t t : d.tokens) {  // one gradient row per token: sparse
          idx.push_back(t);
          for (int j = 0; j < kDim; ++j) rows.push_back(dh[j] / kDocLen);
        }
      }
      // Backward order: the head first, the embedding last; each starts communicating at once.
      m.c->add_dense_grad(gc);
      opt.mark_ready(*m.c);
      m.w->add_dense_grad(gw);
      opt.mark_ready(*m.w);
      m.emb->add_sparse_grad(idx, rows);
      opt.mark_ready(*m.emb);
      opt.synchronize();
      rows_sent += static_cast<int64_t>(m.emb->sparse_indices().size());  // gathered from all ranks
      ++steps;
      opt.step();
    }
    int correct = 0;
    for (const auto& d : test) {
      auto z = m.logits(m.embed(d));
      correct += static_cast<int>(std::max_element(z.begin(), z.end()) - z.begin()) == d.label;
    }
    std::vector<double> loss{loss_sum / static_cast<double>(steps * batch)};
    hvd::allreduce("epoch_loss", hvd::TensorView(loss.data(), hvd::DataType::kFloat64, {1}));
    if (rank == 0) {
      std::printf("epoch %d  loss %.4f  test accuracy %.1f%%  embedding rows exchanged per step %.0f (table: %d)\n",
                  epoch + 1, loss[0], 100.0 * correct / test.size(), static_cast<double>(rows_sent) / steps, kVocab);
    }
  }
  int correct = 0;
  for (const auto& d : test) {
    auto z = m.logits(m.embed(d));
    correct += static_cast<int>(std::max_element(z.begin(), z.end()) - z.begin()) == d.label;
  }
  const double acc = static_cast<double>(correct) / test.size();
  if (rank == 0) std::printf("final test accuracy %.1f%% on %d rank(s)\n", 100.0 * acc, size);
  hvd::shutdown();
  return acc >= 0.9 ? 0 : 1;
}
