// Copyright horovod_cpp authors. The main example: data-parallel training of a LibTorch MLP on
// the UCI handwritten digits (examples/data/digits.csv.gz, 1,797 8x8 images) with horovod_cpp.
//
//   mpirun -np 2 ./train_digits [--epochs N] [--data PATH] [--checkpoint PATH] [--resume] [--cuda]
//
// What it shows, in the order Horovod's recipe puts it:
//   1. hvd::init(); each rank trains on its own shard of the training set (rank r takes every
//      size()-th sample);
//   2. the learning rate is scaled by hvd::size() (the global batch grows with the ranks);
//   3. hvd::torch::DistributedOptimizer wraps torch::optim::SGD: gradients are averaged across
//      ranks from hooks during backward;
//   4. parameters and optimizer state are broadcast from rank 0 (after rank 0 alone has loaded a
//      checkpoint when --resume is given), so every rank starts identical;
//   5. rank 0 alone writes the checkpoint and prints loss, accuracy and time per epoch (with a
//      progress bar when stdout is a terminal).
// At the end it checks the held-out accuracy (>= 95%) and that the weights are bit-identical on
// every rank, and exits non-zero otherwise.
//
// Semi-synchronous modes (docs/training.md): --staleness S applies the averaged gradients of S
// steps earlier; --local-sgd K averages the parameters every K steps (--local-sgd-warmup N
// synchronous steps first). Both flush() at the end of every epoch, before the checkpoint.
// --straggle slows the last rank down (30% of its steps sleep 0-20 ms) to measure throughput.
//
// --cuda trains on the GPU: each rank pins the device the library uses (HOROVOD_CPP_CUDA_DEVICE
// when set, else its local rank modulo the device count) and puts the model, the data and so the
// optimizer state there; the checkpoint is still written with CPU tensors, so either kind of run
// can resume it. Without CUDA support in this build, or without a device, it says so and exits
// with code 77 ("skipped") on every rank.
#include <torch/torch.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "horovod_cpp/horovod_cpp.h"
#include "horovod_cpp/torch.h"

#ifndef HVD_EXAMPLES_DATA_DIR
#define HVD_EXAMPLES_DATA_DIR "examples/data"
#endif

namespace {

struct Options {
  int epochs = 30;
  int batch = 32;  // per rank
  double base_lr = 0.02;
  std::string data = std::string(HVD_EXAMPLES_DATA_DIR) + "/digits.csv.gz";
  std::string checkpoint = "digits_checkpoint.pt";
  bool resume = false;
  bool progress = true;
  int threads = 1;  // intra-op threads per rank: the model is tiny, more threads only add overhead
  double momentum = 0.9;
  int staleness = 0;
  int local_sgd = 0;
  int local_sgd_warmup = 0;
  bool straggle = false;
  bool cuda = false;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--epochs") {
      o.epochs = std::atoi(next().c_str());
    } else if (a == "--batch") {
      o.batch = std::atoi(next().c_str());
    } else if (a == "--lr") {
      o.base_lr = std::atof(next().c_str());
    } else if (a == "--data") {
      o.data = next();
    } else if (a == "--checkpoint") {
      o.checkpoint = next();
    } else if (a == "--resume") {
      o.resume = true;
    } else if (a == "--threads") {
      o.threads = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--no-progress") {
      o.progress = false;
    } else if (a == "--momentum") {
      o.momentum = std::atof(next().c_str());
    } else if (a == "--staleness") {
      o.staleness = std::atoi(next().c_str());
    } else if (a == "--local-sgd") {
      o.local_sgd = std::atoi(next().c_str());
    } else if (a == "--local-sgd-warmup") {
      o.local_sgd_warmup = std::atoi(next().c_str());
    } else if (a == "--straggle") {
      o.straggle = true;
    } else if (a == "--cuda") {
      o.cuda = true;
    } else {
      std::fprintf(
          stderr,
          "usage: %s [--epochs N] [--batch N] [--lr X] [--data digits.csv.gz] [--checkpoint PATH] "
          "[--resume] [--no-progress] [--threads N] [--momentum M] [--staleness S] [--local-sgd K] "
          "[--local-sgd-warmup N] [--straggle] [--cuda]\n",
          argv[0]);
      std::exit(2);
    }
  }
  return o;
}

// Reads "64 pixels (0..16), label" lines from a gzip'd CSV.
bool load_digits(const std::string& path, at::Tensor& x, at::Tensor& y) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return false;
  std::vector<float> px;
  std::vector<int64_t> labels;
  char line[4096];
  while (gzgets(f, line, sizeof(line))) {
    std::vector<int> v;
    char* p = line;
    while (*p && *p != '\n') {
      char* end;
      long n = std::strtol(p, &end, 10);
      if (end == p) break;
      v.push_back(static_cast<int>(n));
      p = *end == ',' ? end + 1 : end;
    }
    if (v.empty()) continue;
    if (v.size() != 65) {
      gzclose(f);
      return false;
    }
    for (int i = 0; i < 64; ++i) px.push_back(static_cast<float>(v[i]) / 16.0f);
    labels.push_back(v[64]);
  }
  gzclose(f);
  const int64_t n = static_cast<int64_t>(labels.size());
  x = at::from_blob(px.data(), {n, 64}, at::kFloat).clone();
  y = at::from_blob(labels.data(), {n}, at::kLong).clone();
  return n > 0;
}

struct NetImpl : ::torch::nn::Module {
  ::torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
  NetImpl() {
    fc1 = register_module("fc1", ::torch::nn::Linear(64, 128));
    fc2 = register_module("fc2", ::torch::nn::Linear(128, 64));
    fc3 = register_module("fc3", ::torch::nn::Linear(64, 10));
  }
  at::Tensor forward(at::Tensor x) {
    x = ::torch::relu(fc1->forward(x));
    x = ::torch::relu(fc2->forward(x));
    return fc3->forward(x);
  }
};
TORCH_MODULE(Net);

double accuracy(Net& net, const at::Tensor& x, const at::Tensor& y) {
  ::torch::NoGradGuard no_grad;
  net->eval();
  auto pred = net->forward(x).argmax(1);
  net->train();
  return pred.eq(y).sum().item<double>() / static_cast<double>(y.size(0));
}

// --cuda: this rank's device (the one the library uses), or a reason why there is none. Every
// rank agrees (an allreduce), so either all train on the GPU or all stop.
bool pick_cuda_device(at::Device* device, std::string* why) {
  const int count = static_cast<int>(::torch::cuda::device_count());
  const char* chosen = std::getenv("HOROVOD_CPP_CUDA_DEVICE");
  int index = -1;
  if (!hvd::torch::has_cuda_support()) {
    *why =
        "this LibTorch / horovod_cpp build has no CUDA support (it needs LibTorch with CUDA and "
        "horovod_cpp built with CUDA)";
  } else if (count == 0) {
    *why = "no CUDA device is available";
  } else if (chosen && *chosen) {
    index = std::atoi(chosen);
    if (index < 0 || index >= count) {
      *why = "HOROVOD_CPP_CUDA_DEVICE=" + std::string(chosen) + " but " + std::to_string(count) +
             " device(s)";
    }
  } else {
    index = hvd::local_rank() % count;
  }
  std::vector<int32_t> ok{why->empty() ? 1 : 0};
  hvd::allreduce("cuda_ok", hvd::TensorView(ok.data(), hvd::DataType::kInt32, {1}),
                 hvd::AllreduceOptions{hvd::ReduceOp::kMin});
  if (ok[0] == 0 && why->empty()) *why = "another rank has no usable CUDA device";
  if (ok[0] == 0) return false;
  *device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
  return true;
}

// Rank 0's checkpoint, written with CPU tensors whatever the device: a CPU copy of the model
// (same structure, so the same parameter order) and a CPU copy of the optimizer state (through
// an in-memory archive loaded onto the CPU).
void save_checkpoint(Net& net, ::torch::optim::SGD& sgd, int64_t epoch, const std::string& path) {
  ::torch::serialize::OutputArchive ar, mar, oar;
  if (net->parameters().front().device().is_cpu()) {
    net->save(mar);
    sgd.save(oar);
  } else {
    Net cpu_net;
    {
      ::torch::NoGradGuard no_grad;
      auto src = net->parameters(), dst = cpu_net->parameters();
      for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
      auto bsrc = net->buffers(), bdst = cpu_net->buffers();
      for (size_t i = 0; i < bsrc.size(); ++i) bdst[i].copy_(bsrc[i]);
    }
    ::torch::optim::SGD cpu_sgd(cpu_net->parameters(),
                                static_cast<const ::torch::optim::SGDOptions&>(sgd.defaults()));
    ::torch::serialize::OutputArchive state;
    sgd.save(state);
    std::string bytes;
    state.save_to([&bytes](const void* data, size_t n) -> size_t {
      bytes.append(static_cast<const char*>(data), n);
      return n;
    });
    ::torch::serialize::InputArchive on_cpu;
    on_cpu.load_from(bytes.data(), bytes.size(), at::Device(at::kCPU));
    cpu_sgd.load(on_cpu);
    cpu_net->save(mar);
    cpu_sgd.save(oar);
  }
  ar.write("model", mar);
  ar.write("optimizer", oar);
  ar.write("epoch", at::tensor(epoch));
  ar.save_to(path);
}

void progress(int done, int total, double seconds) {
  const int width = 30;
  const int fill = total ? done * width / total : width;
  std::printf("\r  [%s%s] %d/%d  %.1fs", std::string(static_cast<size_t>(fill), '#').c_str(),
              std::string(static_cast<size_t>(width - fill), '.').c_str(), done, total, seconds);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  hvd::init();
  const int rank = hvd::rank(), size = hvd::size();
  ::torch::set_num_threads(opt.threads);
  at::Device device(at::kCPU);
  if (opt.cuda) {
    std::string why;
    if (!pick_cuda_device(&device, &why)) {
      std::fprintf(stderr, "rank %d: --cuda: %s; skipped\n", rank, why.c_str());
      hvd::shutdown();
      return 77;
    }
  }

  at::Tensor x, y;
  if (!load_digits(opt.data, x, y)) {
    std::fprintf(stderr, "rank %d: cannot read %s (pass --data PATH)\n", rank, opt.data.c_str());
    hvd::shutdown();
    return 2;
  }
  // The same shuffle on every rank; 20% held out.
  const int64_t n = x.size(0);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(2024));
  const int64_t n_test = n / 5, n_train = n - n_test;
  auto idx = at::from_blob(order.data(), {n}, at::kLong).clone();
  at::Tensor x_train = x.index_select(0, idx.slice(0, 0, n_train)), y_train = y.index_select(0, idx.slice(0, 0, n_train));
  at::Tensor x_test = x.index_select(0, idx.slice(0, n_train)), y_test = y.index_select(0, idx.slice(0, n_train));
  // This rank's shard: every size()-th training sample.
  at::Tensor shard = at::arange(rank, n_train, size, at::kLong);
  at::Tensor xs = x_train.index_select(0, shard).to(device),
             ys = y_train.index_select(0, shard).to(device);
  x_test = x_test.to(device);
  y_test = y_test.to(device);
  const int64_t min_shard = n_train / size;  // every rank runs the same number of steps
  const int steps = static_cast<int>((min_shard + opt.batch - 1) / opt.batch);

  ::torch::manual_seed(static_cast<uint64_t>(1 + rank));  // different on purpose: the broadcast fixes it
  Net net;
  net->to(device);  // before the optimizer and the DistributedOptimizer take its parameters
  ::torch::optim::SGD sgd(net->parameters(), ::torch::optim::SGDOptions(opt.base_lr * size).momentum(opt.momentum));
  int64_t start_epoch = 0;
  if (opt.resume && rank == 0) {  // rank 0 alone reads the checkpoint
    ::torch::serialize::InputArchive ar, mar, oar;
    ar.load_from(opt.checkpoint, device);  // saved on the CPU, loaded onto this run's device
    ar.read("model", mar);
    ar.read("optimizer", oar);
    net->load(mar);
    sgd.load(oar);
    at::Tensor e;
    ar.read("epoch", e);
    start_epoch = e.item<int64_t>();
    std::printf("resumed from %s at epoch %lld\n", opt.checkpoint.c_str(), static_cast<long long>(start_epoch));
  }
  hvd::torch::broadcast_parameters(*net, 0);
  hvd::torch::broadcast_optimizer_state(sgd, 0);
  std::vector<int64_t> se{start_epoch};
  hvd::broadcast("start_epoch", hvd::TensorView(se.data(), hvd::DataType::kInt64, {1}), 0);
  start_epoch = se[0];

  hvd::DistributedOptions dist;
  dist.staleness = opt.staleness;
  dist.local_sgd_period = opt.local_sgd;
  dist.local_sgd_warmup_steps = opt.local_sgd_warmup;
  hvd::torch::DistributedOptimizer dopt(sgd, *net, dist);
  // --straggle: the last rank sleeps 0-20 ms on 30% of its steps.
  std::mt19937 straggle_rng(99);
  std::uniform_real_distribution<double> unif(0.0, 1.0);
  const bool straggler = opt.straggle && rank == size - 1;
  // A progress bar on an interactive terminal only (under mpirun, stdout is a pseudo-terminal
  // even when mpirun's output goes to a file, so TERM is checked too).
  const char* term = std::getenv("TERM");
  const bool tty = rank == 0 && opt.progress && isatty(STDOUT_FILENO) && term && *term &&
                   std::string(term) != "dumb";
  if (rank == 0) {
    std::printf(
        "train_digits: %d rank(s) on %s, %lld training samples (%lld per rank), %lld held out, %d "
        "steps/epoch, "
        "batch %d per rank, peak lr %.3f (cosine decay)\n",
        size, opt.cuda ? "CUDA" : "the CPU", static_cast<long long>(n_train),
        static_cast<long long>(xs.size(0)), static_cast<long long>(n_test), steps, opt.batch,
        opt.base_lr * size);
  }
  double total_time = 0;
  int timed_epochs = 0;
  for (int64_t epoch = start_epoch; epoch < opt.epochs; ++epoch) {
    const auto t0 = std::chrono::steady_clock::now();
    // Cosine decay of the (size()-scaled) learning rate over the epochs.
    const double lr = opt.base_lr * size * 0.5 * (1.0 + std::cos(M_PI * static_cast<double>(epoch) / opt.epochs));
    for (auto& group : sgd.param_groups()) group.options().set_lr(lr);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(epoch * 1000 + rank));
    at::Tensor perm = at::randperm(xs.size(0), gen, at::kLong);
    double loss_sum = 0, correct = 0, seen = 0;
    for (int s = 0; s < steps; ++s) {
      const int64_t b0 = std::min<int64_t>(s * opt.batch, xs.size(0));
      const int64_t b1 = std::min<int64_t>(b0 + opt.batch, xs.size(0));
      at::Tensor bi = perm.slice(0, b0, b1).to(device);
      at::Tensor bx = xs.index_select(0, bi), by = ys.index_select(0, bi);
      dopt.zero_grad();
      at::Tensor logits = net->forward(bx);
      at::Tensor loss = ::torch::nn::functional::cross_entropy(logits, by);
      loss.backward();  // the hooks start each gradient's allreduce here
      if (straggler && unif(straggle_rng) < 0.3) {
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(20.0 * unif(straggle_rng)));
      }
      dopt.step();
      loss_sum += loss.item<double>() * static_cast<double>(by.size(0));
      correct += logits.argmax(1).eq(by).sum().item<double>();
      seen += static_cast<double>(by.size(0));
      if (tty && ((s + 1) % std::max(1, steps / 20) == 0 || s + 1 == steps)) progress(s + 1, steps, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    dopt.flush();  // semi-synchronous modes: every pending update applied, identical weights
    // Global training loss and accuracy: sums over the ranks.
    std::vector<double> stats{loss_sum, correct, seen};
    hvd::allreduce("epoch_stats", hvd::TensorView(stats.data(), hvd::DataType::kFloat64, {3}),
                   hvd::AllreduceOptions{hvd::ReduceOp::kSum});
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    total_time += secs;
    ++timed_epochs;
    if (rank == 0) {
      if (tty) std::printf("\r%60s\r", "");
      std::printf("epoch %3lld/%d  loss %.4f  train acc %5.1f%%  test acc %5.1f%%  time %.3fs\n",
                  static_cast<long long>(epoch + 1), opt.epochs, stats[0] / stats[2], 100.0 * stats[1] / stats[2],
                  100.0 * accuracy(net, x_test, y_test), secs);
      save_checkpoint(net, sgd, epoch + 1, opt.checkpoint);  // rank 0 alone writes it
    }
  }

  // Final checks: held-out accuracy, and bit-identical weights on every rank.
  const double test_acc = accuracy(net, x_test, y_test);
  std::vector<at::Tensor> flat;
  for (const auto& p : net->parameters()) flat.push_back(p.detach().reshape({-1}));
  at::Tensor mine = ::torch::cat(flat).contiguous();
  at::Tensor root = mine.clone();
  hvd::broadcast("final_weights", hvd::torch::view(root), 0);
  std::vector<int32_t> differ{::torch::equal(mine, root) ? 0 : 1};
  hvd::allreduce("final_weights_differ", hvd::TensorView(differ.data(), hvd::DataType::kInt32, {1}),
                 hvd::AllreduceOptions{hvd::ReduceOp::kSum});
  const bool identical = differ[0] == 0;
  const bool acc_ok = test_acc >= 0.95;
  if (rank == 0) {
    if (timed_epochs > 0) {
      std::printf("mean time per epoch: %.3fs over %d epoch(s); %.1f steps/s\n", total_time / timed_epochs,
                  timed_epochs, steps * timed_epochs / total_time);
    }
    std::printf("final held-out accuracy: %.2f%% (%lld samples) %s\n", 100.0 * test_acc,
                static_cast<long long>(n_test), acc_ok ? "(>= 95%: OK)" : "(below 95%: FAILED)");
    std::printf("weights identical on all %d rank(s): %s", size, identical ? "yes\n" : "NO (");
    if (!identical) std::printf("%d rank(s) differ from rank 0)\n", differ[0]);
    std::printf("checkpoint written by rank 0: %s\n", opt.checkpoint.c_str());
  }
  hvd::shutdown();
  return identical && acc_ok ? 0 : 1;
}
