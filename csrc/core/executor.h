// Copyright horovod_cpp authors. The executor: runs a cycle's responses on the data plane.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backends/data_plane.h"
#include "coordination/message.h"
#include "core/tensor_entry.h"

namespace hvd {

/// Background thread only. Owns the fusion buffer, whose size is bounded by the fusion
/// threshold (it never grows with the number of tensors).
class Executor {
 public:
  Executor(DataPlane* plane, int rank, int size, int64_t fusion_threshold)
      : plane_(plane), rank_(rank), size_(size), threshold_(fusion_threshold) {}

  /// Looks up a response's local entry (and removes it from the runtime's table).
  using TakeEntry = std::function<bool(const std::string& name, TensorEntry* out)>;

  /// Executes `responses` in order, fusing allreduces per the fusion plan, and completes each
  /// entry's handle.
  void execute(const std::vector<Response>& responses, const TakeEntry& take);

 private:
  Status allreduce_one(const Response& r, TensorEntry& e);
  Status allreduce_fused(const std::vector<const Response*>& rs, std::vector<TensorEntry*>& es,
                         const std::vector<int64_t>& offsets, int64_t bytes);
  Status reduce_buffer(void* buf, int64_t count, const Response& r);
  Status allgather(const Response& r, TensorEntry& e);

  DataPlane* plane_;
  int rank_, size_;
  int64_t threshold_;
  std::vector<unsigned char> fusion_buffer_;
};

}  // namespace hvd
