// Copyright horovod_cpp authors. A process set: a group of ranks that negotiate and run
// collectives together, independently of every other set.
//
// Each set owns its planes (control plane and transports, made by the runtime's World or, in
// unit tests, in-process ones), its table of submitted tensors (core/tensor_table.h), its
// cycle (negotiation and execution, core/cycle.h) and its scheduler (the background thread
// and the user threads that drive cycles while they wait, core/scheduler.h), so one set's
// stall or slow collective never holds up another set's work. Set 0 holds every rank.
//
// Threads: user threads call enqueue() (any number, concurrently); the table's lock guards
// what they share with the cycle. The cycle (controller, executor, autotuner, timeline
// bookkeeping) belongs to whichever thread the scheduler lets run it.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "transport/world.h"
#include "common/config.h"
#include "core/cycle.h"
#include "core/scheduler.h"
#include "core/tensor_entry.h"
#include "core/tensor_table.h"

namespace hvd {

class Timeline;

/// The wiring of one set: planes, table, cycle, scheduler.
class ProcessSetState : public detail::CycleDriver {
 public:
  /// Takes ownership of `planes` (this rank must be a member) and starts the background thread.
  /// Made by create() only (handles keep a weak reference to the set, as_driver()).
  ProcessSetState(int id, std::vector<int> global_ranks, int my_global_rank,
                  std::unique_ptr<SetPlanes> planes, const Config& config, Timeline* timeline);
  /// A new set (the constructor's arguments), shared.
  static std::shared_ptr<ProcessSetState> create(int id, std::vector<int> global_ranks,
                                                 int my_global_rank,
                                                 std::unique_ptr<SetPlanes> planes,
                                                 const Config& config, Timeline* timeline);
  ~ProcessSetState() override;
  ProcessSetState(const ProcessSetState&) = delete;
  ProcessSetState& operator=(const ProcessSetState&) = delete;

  int id() const { return id_; }
  const std::vector<int>& ranks() const { return global_ranks_; }
  int rank() const { return rank_; }  ///< this rank's index in ranks()
  int size() const { return static_cast<int>(global_ranks_.size()); }
  /// The set's transports, in the order they are tried (read-only after construction).
  const TransportRegistry& transports() const { return *planes_->transports; }

  /// A fresh "<op>.noname.<n>" name for an unnamed call: n counts this set's unnamed calls of
  /// that op on this rank, so unnamed calls must come in the same order on every member.
  std::string auto_name(OpType op) {
    return std::string(op_type_name(op)) + ".noname." +
           std::to_string(noname_counter_[static_cast<int>(op)]++);
  }

  /// Submits `n` (at least one) tensors atomically (a group arrives in one cycle): each field
  /// is written once, straight into the negotiation's request and the tensor's place (views,
  /// shapes and splits are moved out of `tensors`, the handle out of `common`). Fails at
  /// once, taking nothing and leaving `tensors` and `common` as they were, if a name is
  /// already pending or the set has stopped.
  Status enqueue(TensorSubmit* tensors, size_t n, SubmitCommon& common) {
    return table_.enqueue(tensors, n, common);
  }

  /// Asks every member to stop (their pending operations fail with a ShutdownError naming this
  /// rank) without waiting.
  void request_shutdown() { table_.request_shutdown(); }
  /// request_shutdown(), then waits for this rank's thread.
  void shutdown() { scheduler_.shutdown(); }
  /// False once the set stopped (shutdown on any member, stall, fatal error).
  bool running() const { return !table_.stopped(); }
  std::string stop_reason() const { return table_.stop_reason(); }

  /// This set as the CycleDriver of its handles (HandleState::set_driver): a weak reference
  /// made once, so each submission copies it (one reference count) instead of converting
  /// weak_from_this() (which locks and releases a strong reference, three more atomics on a
  /// cache line the background thread shares).
  const std::weak_ptr<detail::CycleDriver>& as_driver() const { return self_; }

  /// For tests: how many names are bound to a place now, and whether `name` is.
  size_t bound_names() const { return table_.bound_names(); }
  bool is_bound(const std::string& name) const { return table_.is_bound(name); }

  // detail::CycleDriver: a thread waiting on one of this set's handles runs cycles itself.
  Drive try_drive() override { return scheduler_.try_drive(); }
  void begin_driving() override { scheduler_.begin_driving(); }
  void end_driving() override { scheduler_.end_driving(); }

 private:
  static int index_of(const std::vector<int>& ranks, int global_rank);

  std::weak_ptr<detail::CycleDriver> self_;  // set by create(), before the set is shared
  const int id_;
  const std::vector<int> global_ranks_;
  const int rank_;
  std::unique_ptr<SetPlanes> planes_;  // outlives the cycle, which uses it
  TensorTable table_;
  Cycle cycle_;
  Scheduler scheduler_;  // declared last: its thread stops first
  std::atomic<uint64_t> noname_counter_[kMaxOpType + 1] = {};
};

}  // namespace hvd
