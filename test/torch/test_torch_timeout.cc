// Copyright horovod_cpp authors. Timed-out waits of the LibTorch adapter with a stalled peer:
// rank 1 runs its step only after every other rank's step() has timed out and those ranks have
// destroyed the optimizer, the model and their gradients. The reductions then complete into
// tensors the library kept alive (parked): nothing in flight is freed (also run under
// AddressSanitizer). Rank 1 checks the averaged gradients, which the other ranks' kept tensors
// fed, and the next collective works on every rank.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "horovod_cpp/torch.h"
#include "test/training/stalled_peer.h"
#include "torch_test_util.h"

namespace {

using stalled_peer::check_next_collective_works;
using stalled_peer::check_parking_drains;
using stalled_peer::kLate;
using stalled_peer::kLong;
using stalled_peer::kShort;
using stalled_peer::kStalled;
using stalled_peer::require_timeout;

using hvdtorchtest::Session;

// Every parameter's gradient is rank + 1 (a loss of (rank + 1) * sum of the parameters).
void stalled_step(hvd::Compression compression, const std::string& prefix) {
  const double average = (hvd::size() + 1) / 2.0;
  {
    ::torch::manual_seed(5);
    ::torch::nn::Linear model(::torch::nn::LinearOptions(40, 30));
    ::torch::optim::SGD sgd(model->parameters(), ::torch::optim::SGDOptions(0.1));
    hvd::DistributedOptions o = hvdtorchtest::dist_opts_with(hvd::rank() == kStalled ? kLong : kShort);
    o.compression = compression;
    o.name_prefix = prefix;
    hvd::torch::DistributedOptimizer opt(sgd, *model, o);
    if (hvd::rank() == kStalled) std::this_thread::sleep_for(kLate);
    opt.zero_grad();
    at::Tensor loss = at::zeros({}, at::kFloat);
    for (auto& p : model->parameters()) loss = loss + p.sum();
    (loss * static_cast<double>(hvd::rank() + 1)).backward();  // the hooks start the allreduces
    REQUIRE(opt.in_flight() == 2);
    if (hvd::rank() == kStalled) {
      opt.synchronize();
      for (auto& p : model->parameters()) REQUIRE(at::equal(p.grad(), at::full_like(p, average)));
    } else {
      // The error names the collective still pending.
      require_timeout([&] { opt.step(); }, "'" + prefix + ".");
      REQUIRE(opt.steps_taken() == 0);
      REQUIRE(opt.in_flight() == 2);
    }
  }  // optimizer, SGD, model and gradients destroyed here, on every rank
  check_next_collective_works(prefix + ".after");
  check_parking_drains();
}

}  // namespace

TEST_CASE("torch: timed-out step() with a stalled peer frees nothing in flight", "[torch][timeout]") {
  Session session;
  stalled_step(hvd::Compression::kNone, "ttimeout.dense");
}

TEST_CASE("torch: timed-out step() with fp16 compression keeps the fp16 copies alive", "[torch][timeout]") {
  Session session;
  stalled_step(hvd::Compression::kFP16, "ttimeout.fp16");
}
