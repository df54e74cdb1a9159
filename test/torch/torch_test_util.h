// Copyright horovod_cpp authors. Helpers shared by the LibTorch adapter's test files.
#pragma once

#include <torch/torch.h>

#include <chrono>

#include "horovod_cpp/torch.h"

namespace hvdtorchtest {

/// init() for one test case, shutdown() at its end; one intra-op thread (ranks share cores).
struct Session {
  Session() {
    ::torch::set_num_threads(1);
    hvd::init();
  }
  ~Session() { hvd::shutdown(); }
};

/// DistributedOptions that fail a wait after `timeout` instead of hanging.
inline hvd::DistributedOptions dist_opts_with(std::chrono::milliseconds timeout) {
  hvd::DistributedOptions o;
  o.timeout = timeout;
  return o;
}

}  // namespace hvdtorchtest
