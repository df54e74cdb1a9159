// Copyright horovod_cpp authors. The hook through which the executor hands batches of CUDA
// tensors to the GPU data plane (backends/nccl), which the core does not otherwise know.
#pragma once

#include <vector>

#include "coordination/message.h"
#include "core/tensor_entry.h"
#include "fusion/fusion_planner.h"

namespace hvd {

/// Runs batches of the fusion plan whose tensors live on a CUDA device. Called from the
/// process set's background thread only. Implementations enqueue the work on their own
/// stream and return without waiting for the device; the entries' handles are completed later
/// (success or a clear error) by the implementation, from any thread.
class DeviceRunner {
 public:
  virtual ~DeviceRunner() = default;
  /// `rs[k]` is the response of `entries[k]`; `present[k]` is false for allreduces this rank
  /// did not submit (joined: it contributes zeros). Takes over the present entries.
  virtual void run(const FusionBatch& batch, const std::vector<const Response*>& rs,
                   std::vector<TensorEntry>& entries, const std::vector<bool>& present,
                   bool joined) = 0;
  /// Waits until every handle given to run() has been completed (used at shutdown).
  virtual void drain() = 0;
};

}  // namespace hvd
