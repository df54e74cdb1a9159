// Copyright horovod_cpp authors. Elastic training (issue 37) of a small MLP on the UCI digits
// (examples/data/digits.csv.gz; 80% train, 20% held out) with horovod_cpp/training.h and
// horovod_cpp/elastic.h: a job that loses a worker goes on with the others, and grows when hvdrun's
// elastic driver finds new hosts.
//
//   hvdrun --min-np 2 --max-np 4 --host-discovery-script ./hosts.sh ./digits_elastic
//   mpirun -np 2 ./digits_elastic          (not elastic: the same program, a fixed job)
//
// Options: --epochs N (default 20), --batch N (per rank, 32), --lr X (per rank, 0.05),
// --commit-every N (batches, 10), --data PATH, --step-sleep-ms N (slows each step down, for
// tests that kill a worker mid-run), --min-accuracy X (default 0.95).
//
// The elastic state (hvd::elastic::TensorState) holds the parameters, the SGD's momentum and
// learning rate, and three integers: the epoch, the batch within it and the samples of the
// epoch already consumed (a position that stays right when the number of ranks changes). Each
// global step takes the next batch * size() samples of the epoch's permutation, rank r the
// r-th run of `batch`. The state is committed every --commit-every batches and at the end of
// every epoch. The learning rate is --lr * size() * 0.9^epoch, set again after a reset.
//
// With HVD_ELASTIC_LOG=<dir>, each worker appends to <dir>/<worker id>.log (HOROVOD_CPP_WORKER_ID,
// or rank<r> when unset) one line per commit, written once the commit is saved:
//     commit epoch=E batch=B rank=R size=S generation=G
// (E, B: the position the next step starts from), and at the end
//     final epoch=E rank=R size=S checksum=<16 hex digits of the parameters' FNV-1a hash>
// At the end every rank checks that its parameters are bit-identical to rank 0's and that the
// held-out accuracy is at least --min-accuracy; it exits 1 otherwise.
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "horovod_cpp/elastic.h"
#include "horovod_cpp/horovod_cpp.h"
#include "horovod_cpp/training.h"

#ifndef HVD_EXAMPLES_DATA_DIR
#define HVD_EXAMPLES_DATA_DIR "examples/data"
#endif

namespace {

constexpr int kIn = 64, kHidden = 32, kOut = 10;

struct Options {
  int epochs = 20;
  int batch = 32;
  double lr = 0.05;
  int commit_every = 10;
  int step_sleep_ms = 0;
  double min_accuracy = 0.95;
  std::string data = std::string(HVD_EXAMPLES_DATA_DIR) + "/digits.csv.gz";
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr,
                   "usage: %s [--epochs N] [--batch N] [--lr X] [--commit-every N] "
                   "[--data PATH] [--step-sleep-ms N] [--min-accuracy X]\n",
                   argv[0]);
      std::exit(2);
    }
    const char* v = argv[++i];
    if (a == "--epochs")
      o.epochs = std::atoi(v);
    else if (a == "--batch")
      o.batch = std::max(1, std::atoi(v));
    else if (a == "--lr")
      o.lr = std::atof(v);
    else if (a == "--commit-every")
      o.commit_every = std::max(1, std::atoi(v));
    else if (a == "--data")
      o.data = v;
    else if (a == "--step-sleep-ms")
      o.step_sleep_ms = std::atoi(v);
    else if (a == "--min-accuracy")
      o.min_accuracy = std::atof(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      std::exit(2);
    }
  }
  return o;
}

struct Data {
  std::vector<float> x;  // n x 64, pixels / 16
  std::vector<int> y;
  int train = 0;  // samples [0, train) train, the others (20%) are held out
  int n() const { return static_cast<int>(y.size()); }
};

// "64 pixels (0..16), label" lines from a gzip'd CSV.
bool load_digits(const std::string& path, Data* d) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return false;
  char line[4096];
  while (gzgets(f, line, sizeof(line))) {
    std::vector<int> v;
    for (char* p = line; *p && *p != '\n';) {
      char* end;
      const long n = std::strtol(p, &end, 10);
      if (end == p) break;
      v.push_back(static_cast<int>(n));
      p = *end == ',' ? end + 1 : end;
    }
    if (v.empty()) continue;
    if (v.size() != kIn + 1) break;
    for (int i = 0; i < kIn; ++i) d->x.push_back(static_cast<float>(v[i]) / 16.0f);
    d->y.push_back(v[kIn]);
  }
  gzclose(f);
  // The same shuffle everywhere before the split: the file is ordered by writer.
  std::vector<int> order(static_cast<size_t>(d->n()));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(42));
  Data s;
  for (int i : order) {
    s.x.insert(s.x.end(), d->x.begin() + i * kIn, d->x.begin() + (i + 1) * kIn);
    s.y.push_back(d->y[static_cast<size_t>(i)]);
  }
  s.train = s.n() * 4 / 5;
  *d = std::move(s);
  return d->train > 0;
}

// The MLP 64 -> 32 (ReLU) -> 10 (softmax), weights stored out x in.
struct Model {
  hvd::ParameterPtr w1, b1, w2, b2;
  hvd::ParameterList params() const { return {w1, b1, w2, b2}; }

  Model() {
    std::mt19937 gen(7);  // the same start on every rank (sync makes it so anyway)
    auto init = [&](int fan_in, int count) {
      std::normal_distribution<float> dist(0.0f, std::sqrt(2.0f / static_cast<float>(fan_in)));
      std::vector<float> v(static_cast<size_t>(count));
      for (float& x : v) x = dist(gen);
      return v;
    };
    w1 = hvd::make_parameter("w1", {kHidden, kIn}, init(kIn, kHidden * kIn));
    b1 = hvd::make_parameter("b1", {kHidden});
    w2 = hvd::make_parameter("w2", {kOut, kHidden}, init(kHidden, kOut * kHidden));
    b2 = hvd::make_parameter("b2", {kOut});
  }

  // Logits of sample `x` (and the hidden activations).
  void forward(const float* x, float* h, float* logits) const {
    const auto& W1 = w1->value();
    const auto& W2 = w2->value();
    for (int j = 0; j < kHidden; ++j) {
      float s = b1->value()[j];
      for (int i = 0; i < kIn; ++i) s += W1[j * kIn + i] * x[i];
      h[j] = std::max(0.0f, s);
    }
    for (int k = 0; k < kOut; ++k) {
      float s = b2->value()[k];
      for (int j = 0; j < kHidden; ++j) s += W2[k * kHidden + j] * h[j];
      logits[k] = s;
    }
  }

  // Adds the gradient of the mean cross-entropy over `idx` to the parameters' gradients.
  void backward(const Data& d, const std::vector<int>& idx) {
    auto& gW1 = w1->dense_grad();
    auto& gb1 = b1->dense_grad();
    auto& gW2 = w2->dense_grad();
    auto& gb2 = b2->dense_grad();
    const float scale = idx.empty() ? 0.0f : 1.0f / static_cast<float>(idx.size());
    for (int s : idx) {
      const float* x = &d.x[static_cast<size_t>(s) * kIn];
      float h[kHidden], z[kOut], dh[kHidden] = {};
      forward(x, h, z);
      const float m = *std::max_element(z, z + kOut);
      float sum = 0;
      for (float& v : z) sum += (v = std::exp(v - m));
      for (int k = 0; k < kOut; ++k) {
        const float g = (z[k] / sum - (k == d.y[static_cast<size_t>(s)] ? 1.0f : 0.0f)) * scale;
        gb2[k] += g;
        for (int j = 0; j < kHidden; ++j) {
          gW2[k * kHidden + j] += g * h[j];
          dh[j] += g * w2->value()[k * kHidden + j];
        }
      }
      for (int j = 0; j < kHidden; ++j) {
        if (h[j] <= 0.0f) continue;
        gb1[j] += dh[j];
        for (int i = 0; i < kIn; ++i) gW1[j * kIn + i] += dh[j] * x[i];
      }
    }
  }

  double accuracy(const Data& d, int from, int to) const {
    int right = 0;
    for (int s = from; s < to; ++s) {
      float h[kHidden], z[kOut];
      forward(&d.x[static_cast<size_t>(s) * kIn], h, z);
      right += static_cast<int>(std::max_element(z, z + kOut) - z) == d.y[static_cast<size_t>(s)];
    }
    return static_cast<double>(right) / (to - from);
  }
};

uint64_t checksum(const hvd::ParameterList& params) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& p : params) {
    const auto* b = reinterpret_cast<const unsigned char*>(p->value().data());
    for (size_t i = 0; i < p->value().size() * sizeof(float); ++i)
      h = (h ^ b[i]) * 1099511628211ull;
  }
  return h;
}

// The per-worker log of HVD_ELASTIC_LOG (null when unset).
FILE* open_log() {
  const char* dir = std::getenv("HVD_ELASTIC_LOG");
  if (!dir || !*dir) return nullptr;
  const char* id = std::getenv("HOROVOD_CPP_WORKER_ID");
  const std::string name = id && *id ? id : "rank" + std::to_string(hvd::rank());
  const std::string path = std::string(dir) + "/" + name + ".log";
  FILE* f = std::fopen(path.c_str(), "a");
  if (!f) std::fprintf(stderr, "cannot open %s\n", path.c_str());
  return f;
}

// Rank 0's parameters, bitwise, on every rank? (collective)
bool identical_to_rank0(const hvd::ParameterList& params) {
  std::vector<int32_t> differ{0};
  for (const auto& p : params) {
    std::vector<float> root = p->value();
    hvd::broadcast("digits.final." + p->name(),
                   hvd::TensorView(root.data(), hvd::DataType::kFloat32, p->shape()), 0);
    if (std::memcmp(root.data(), p->value().data(), root.size() * sizeof(float)) != 0)
      differ[0] = 1;
  }
  hvd::allreduce("digits.final.differ", hvd::TensorView(differ.data(), hvd::DataType::kInt32, {1}));
  return differ[0] == 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  Data data;
  if (!load_digits(o.data, &data)) {
    std::fprintf(stderr, "cannot read the digits from %s\n", o.data.c_str());
    return 2;
  }
  hvd::init();
  Model model;
  hvd::SGDOptions so;
  so.momentum = 0.9;
  auto sgd = std::make_shared<hvd::SGD>(model.params(), so);
  hvd::elastic::TensorState state(model.params(), sgd, {{"epoch", 0}, {"batch", 0}, {"offset", 0}});
  // The global batch grows with the ranks, and the rate decays by epoch.
  auto set_lr = [&] {
    sgd->set_learning_rate(o.lr * hvd::size() * std::pow(0.9, double(state.value("epoch"))));
  };
  set_lr();
  state.register_reset_callbacks(set_lr);  // a new membership: a new size()
  FILE* log = open_log();

  const int train = data.train;
  hvd::elastic::run(state, [&](hvd::elastic::State&) {
    // Made per pass: its collectives belong to this membership's runtime.
    hvd::DistributedOptimizer opt(sgd);
    const int size = hvd::size(), rank = hvd::rank();
    std::vector<int> perm(train), idx;
    while (state.value("epoch") < o.epochs) {
      const int64_t epoch = state.value("epoch");
      if (state.value("offset") == 0) set_lr();
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), std::mt19937(static_cast<uint32_t>(1000 + epoch)));
      while (state.value("offset") < train) {
        const int64_t offset = state.value("offset");
        idx.clear();
        for (int64_t i = offset + int64_t(rank) * o.batch;
             i < std::min<int64_t>(train, offset + int64_t(rank + 1) * o.batch); ++i) {
          idx.push_back(perm[static_cast<size_t>(i)]);
        }
        opt.zero_grad();
        model.backward(data, idx);
        for (const auto& p : model.params()) opt.mark_ready(*p);
        opt.step();
        if (o.step_sleep_ms > 0)
          std::this_thread::sleep_for(std::chrono::milliseconds(o.step_sleep_ms));
        state.set_value("offset", offset + int64_t(size) * o.batch);
        state.set_value("batch", state.value("batch") + 1);
        const bool epoch_end = state.value("offset") >= train;
        if (epoch_end) {
          state.set_value("epoch", epoch + 1);
          state.set_value("batch", 0);
          state.set_value("offset", 0);
        }
        if (epoch_end || state.value("batch") % o.commit_every == 0) {
          state.save();  // commit(): save, log, then check for new hosts
          if (log) {
            std::fprintf(log, "commit epoch=%lld batch=%lld rank=%d size=%d generation=%lld\n",
                         static_cast<long long>(state.value("epoch")),
                         static_cast<long long>(state.value("batch")), rank, size,
                         static_cast<long long>(hvd::elastic::generation()));
            std::fflush(log);
          }
          state.check_host_updates();
        }
        if (epoch_end) break;
      }
      if (rank == 0) {
        std::printf("epoch %2lld  size %d  held-out accuracy %.4f\n",
                    static_cast<long long>(state.value("epoch")), size,
                    model.accuracy(data, train, data.n()));
        std::fflush(stdout);
      }
    }
  });

  const double acc = model.accuracy(data, data.train, data.n());
  const bool same = identical_to_rank0(model.params());
  if (log) {
    std::fprintf(log, "final epoch=%lld rank=%d size=%d checksum=%016llx\n",
                 static_cast<long long>(state.value("epoch")), hvd::rank(), hvd::size(),
                 static_cast<unsigned long long>(checksum(model.params())));
    std::fclose(log);
  }
  std::printf("rank %d/%d: held-out accuracy %.4f, parameters %s rank 0's\n", hvd::rank(),
              hvd::size(), acc, same ? "identical to" : "DIFFERENT from");
  hvd::shutdown();
  return acc >= o.min_accuracy && same ? 0 : 1;
}
