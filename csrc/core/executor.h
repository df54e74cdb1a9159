// Copyright horovod_cpp authors. The executor: runs a cycle's responses on the data plane.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backends/data_plane.h"
#include "coordination/message.h"
#include "core/device_runner.h"
#include "core/tensor_entry.h"

namespace hvd {

class Timeline;
class ShmAllreduce;

/// Background thread of one process set only. Owns the fusion buffer, whose size is bounded
/// by the fusion threshold (it never grows with the number of tensors); reducescatter and
/// joined ranks use a scratch buffer sized by the largest such tensor.
class Executor {
 public:
  /// `global_ranks`: the set's members (set rank -> global rank), for broadcast roots.
  Executor(DataPlane* plane, int rank, int size, int64_t fusion_threshold,
           std::vector<int> global_ranks, Timeline* timeline = nullptr)
      : plane_(plane), rank_(rank), size_(size), threshold_(fusion_threshold),
        global_ranks_(std::move(global_ranks)), timeline_(timeline) {}

  /// Allreduces of at least `min_bytes` go through `shm` (null: never).
  void set_shm(ShmAllreduce* shm, int64_t min_bytes) {
    shm_ = shm;
    shm_min_bytes_ = min_bytes;
  }

  /// Changes the fusion threshold from the next execute() on (autotune; background thread).
  void set_fusion_threshold(int64_t bytes) { threshold_ = bytes; }

  /// GPU data plane: batches of CUDA tensors go to `runner` (owned by the process set); without
  /// one they fail with a clear error.
  void set_device_runner(DeviceRunner* runner) { device_runner_ = runner; }

  /// Looks up the responses' local entries (and removes them from the process set's table).
  /// Fills (*entries)[i] and (*present)[i] for responses[i], all under one lock.
  using TakeEntries = std::function<void(const std::vector<Response>& responses,
                                         std::vector<TensorEntry>* entries,
                                         std::vector<bool>* present)>;

  /// Executes `responses` in order, fusing allreduces per the fusion plan, and completes each
  /// entry's handle. `joined`: this rank called join(), so allreduces it did not submit run
  /// with zeros, and failures of tensors it did not submit are not its to report.
  void execute(const std::vector<Response>& responses, const TakeEntries& take, bool joined);

 private:
  Status run_single(const Response& r, TensorEntry& e, bool present);
  Status allreduce_one(const Response& r, TensorEntry& e, bool present);
  Status allreduce_fused(const std::vector<const Response*>& rs, std::vector<TensorEntry>& es,
                         const std::vector<bool>& present, const std::vector<int64_t>& offsets,
                         int64_t bytes);
  Status reduce_buffer(void* buf, int64_t count, const Response& r);
  Status allreduce_shm(const std::vector<const Response*>& rs, std::vector<TensorEntry>& es,
                       const std::vector<bool>& present);
  Status allgather(const Response& r, TensorEntry& e);
  Status alltoall(const Response& r, TensorEntry& e);
  Status reducescatter(const Response& r, TensorEntry& e);
  int set_rank_of(int global_rank) const;
  unsigned char* scratch(int64_t bytes);

  DataPlane* plane_;
  int rank_, size_;
  int64_t threshold_;
  std::vector<int> global_ranks_;
  std::vector<unsigned char> fusion_buffer_;
  std::vector<unsigned char> scratch_;
  Timeline* timeline_;
  ShmAllreduce* shm_ = nullptr;
  int64_t shm_min_bytes_ = 0;
  DeviceRunner* device_runner_ = nullptr;  // GPU data plane (NCCL builds)
};

}  // namespace hvd
