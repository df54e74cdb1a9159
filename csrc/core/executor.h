// Copyright horovod_cpp authors. The executor: runs a cycle's responses on the transports.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "coordination/message.h"
#include "core/tensor_entry.h"
#include "fusion/fusion_planner.h"
#include "transport/registry.h"

namespace hvd {

class Timeline;

/// Inside a catch block: what the exception in flight says ("out of memory (std::bad_alloc)",
/// "exception: <what()>"), for error messages.
std::string describe_current_exception();

/// Background thread of one process set only. Plans the fusion of a cycle's responses, turns
/// each batch into a Batch (plain values: transport/batch.h) for the first transport of the
/// registry that accepts it, and
/// completes the entries' handles from the outcome the transport reports (now, or later from
/// the transport's own thread). It names no transport.
class Executor {
 public:
  /// `global_ranks`: the set's members (set rank -> global rank), for broadcast roots.
  Executor(TransportRegistry* transports, int64_t fusion_threshold, std::vector<int> global_ranks,
           Timeline* timeline)
      : transports_(transports), threshold_(fusion_threshold),
        global_ranks_(std::move(global_ranks)), timeline_(timeline) {}

  /// Changes the fusion threshold from the next execute() on (autotune; background thread).
  void set_fusion_threshold(int64_t bytes) { threshold_ = bytes; }

  /// Looks up the responses' local entries (and removes them from the process set's table).
  /// Sets (*entries)[i] to the entry of responses[i], null where this rank did not submit it.
  /// The entries stay where they are (moving one costs more than a tiny tensor's collective):
  /// the caller keeps them alive until execute() returns.
  using TakeEntries = std::function<void(const std::vector<Response>& responses,
                                         std::vector<PendingTensor*>* entries)>;

  /// Executes `responses` in order, fusing allreduces per the fusion plan, and completes each
  /// entry's handle. `joined`: this rank called join(), so allreduces it did not submit run
  /// with zeros, and failures of tensors it did not submit are not its to report.
  /// When a transport throws, the batch's handles fail with a message naming the collective,
  /// the tensor, the transport and the exception, and a std::runtime_error saying the same
  /// leaves execute() (the batches after it are not run: the set must stop).
  void execute(const std::vector<Response>& responses, const TakeEntries& take, bool joined);

 private:
  int set_rank_of(int global_rank) const;
  /// Fills `b` (every field but tensors, phase and done) from the batch's first response.
  void describe_batch(const Response& r0, const FusionBatch& fb, Batch* b) const;

  TransportRegistry* transports_;
  int64_t threshold_;
  FusionPlanner planner_;  // keeps the plan's memory from cycle to cycle
  std::vector<int> global_ranks_;
  Timeline* timeline_;
  std::vector<PendingTensor*> entries_;  // execute()'s scratch, kept for its room
  // The last batch a transport finished before returning, for the room of its vectors: built
  // anew, a fused batch of a thousand tensors allocates ~150 KiB per cycle, and each such
  // allocation makes glibc merge its free small blocks (every tiny tensor's next allocation
  // then takes its slow path).
  Batch spare_;
  std::vector<std::pair<std::shared_ptr<detail::HandleState>, int>> spare_parts_;
};

}  // namespace hvd
