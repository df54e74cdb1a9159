// Copyright horovod_cpp authors. Data-parallel linear regression with the plain C++ training
// API (horovod_cpp/training.h): fits y = 2x + 10 from noisy samples. No LibTorch needed.
//
//   mpirun -np 2 ./linear_regression
//
// Each rank draws its own shard of the data; gradients are averaged across ranks by
// hvd::DistributedOptimizer around the reference hvd::SGD. Exits non-zero if the fit is off.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "horovod_cpp/horovod_cpp.h"
#include "horovod_cpp/training.h"

int main() {
  hvd::init();
  const int rank = hvd::rank(), size = hvd::size();

  // This rank's shard: 1,024 samples, x in [-1, 1], y = 2x + 10 + noise.
  const int n = 1024;
  std::mt19937 gen(1234 + rank);
  std::uniform_real_distribution<float> ux(-1.0f, 1.0f);
  std::normal_distribution<float> noise(0.0f, 0.3f);
  std::vector<float> xs(n), ys(n);
  for (int i = 0; i < n; ++i) {
    xs[i] = ux(gen);
    ys[i] = 2.0f * xs[i] + 10.0f + noise(gen);
  }

  // The model y = w x + b, randomly initialized per rank, then made identical by broadcast.
  std::mt19937 init_gen(99 + rank);
  std::normal_distribution<float> init(0.0f, 1.0f);
  auto w = hvd::make_parameter("w", {1}, {init(init_gen)});
  auto b = hvd::make_parameter("b", {1}, {init(init_gen)});
  hvd::ParameterList params{w, b};
  hvd::broadcast_parameters(params, 0);

  hvd::SGDOptions so;
  so.lr = 0.1;  // the global batch grows with size(); the per-rank loss is already a mean
  so.momentum = 0.9;
  auto sgd = std::make_shared<hvd::SGD>(params, so);
  hvd::DistributedOptimizer opt(sgd);
  hvd::broadcast_optimizer_state(opt, 0);

  const int batch = 32, epochs = 20;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    opt.set_learning_rate(so.lr * std::pow(0.8, epoch));  // decay: the last steps average out the noise
    double loss_sum = 0;
    for (int start = 0; start < n; start += batch) {
      const int end = std::min(n, start + batch);
      opt.zero_grad();
      // Forward and backward of the mean squared error over the local mini-batch.
      float gw = 0, gb = 0;
      for (int i = start; i < end; ++i) {
        const float err = w->value()[0] * xs[i] + b->value()[0] - ys[i];
        loss_sum += 0.5 * err * err;
        gw += err * xs[i] / static_cast<float>(end - start);
        gb += err / static_cast<float>(end - start);
      }
      b->dense_grad()[0] = gb;
      opt.mark_ready(*b);  // its allreduce starts now
      w->dense_grad()[0] = gw;
      opt.mark_ready(*w);
      opt.step();  // waits for both, then SGD
    }
    // The mean loss across ranks, for printing.
    std::vector<double> loss{loss_sum / n};
    hvd::allreduce("epoch_loss", hvd::TensorView(loss.data(), hvd::DataType::kFloat64, {1}));
    if (rank == 0) {
      std::printf("epoch %2d  loss %.4f  w %.4f  b %.4f\n", epoch + 1, loss[0], w->value()[0], b->value()[0]);
    }
  }
  const bool ok = std::fabs(w->value()[0] - 2.0f) < 0.1f && std::fabs(b->value()[0] - 10.0f) < 0.1f;
  if (rank == 0) {
    std::printf("fitted y = %.3f x + %.3f on %d rank(s): %s\n", w->value()[0], b->value()[0], size,
                ok ? "OK" : "FAILED (expected y = 2x + 10)");
  }
  hvd::shutdown();
  return ok ? 0 : 1;
}
