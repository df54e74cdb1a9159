// Copyright horovod_cpp authors. The API's side of the one route into a process set's table:
// a call's tensors checked on this rank, then submitted as one unit.
//
// A check on one tensor that fails here (a bad argument, an unusable device) is kept, and
// submit() still sends the tensors, carrying the reason (Request::error), before it throws:
// the coordinator fails them on every rank with a message naming this rank and the reason,
// so the ranks whose own checks passed get an error instead of waiting forever.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/name_index.h"
#include "core/process_set.h"
#include "core/runtime.h"
#include "core/tensor_entry.h"
#include "horovod_cpp/errors.h"
#include "horovod_cpp/handle.h"

namespace hvd {

/// "<op> '<name>'", for messages about a tensor of a submission.
std::string describe(const TensorSubmit& t);
/// True when a tensor of `shape` has elements but no data.
inline bool data_missing(const void* data, const Shape& shape) {
  return data == nullptr && num_elements(shape) > 0;
}
/// True when a tensor has a negative extent.
inline bool negative_dimension(const Shape& shape) {
  for (int64_t d : shape) {
    if (d < 0) return true;
  }
  return false;
}
/// Integer tensors are scaled in double and truncated (Horovod's rule) on the CPU; the GPU
/// kernels scale floating types only.
inline bool scaling_unsupported(DataType dtype, const Device& device, double pre, double post) {
  return (pre != 1.0 || post != 1.0) && !is_floating_point(dtype) &&
         (dtype == DataType::kBool || device.is_cuda());
}
/// Throws the InvalidArgumentError of set_reduction() for `q`.
[[noreturn]] void refuse_reduction(const TensorSubmit& q, ReduceOp op);
/// Sets `q`'s reduction; throws InvalidArgumentError if its dtype and device cannot take it.
/// Inline, the failures out of line: every allreduce passes here.
inline void set_reduction(TensorSubmit& q, ReduceOp op, double pre, double post) {
  q.reduce_op = op;
  q.prescale = pre;
  q.postscale = post;
  const DataType dtype = q.input->dtype;
  if ((dtype == DataType::kBool && op == ReduceOp::kAverage) ||
      (op == ReduceOp::kAdasum && !is_floating_point(dtype)) ||
      scaling_unsupported(dtype, q.input->device, pre, post)) {
    refuse_reduction(q, op);
  }
}
/// Throws InvalidArgumentError for a scalar (collectives that split or stack dimension 0).
void check_not_scalar(const TensorSubmit& q);

/// One submission being built: the runtime, the target set and its tensors, then submit(),
/// the one route into the set's table (ProcessSetState::enqueue) for every call. A call of
/// one tensor keeps it in the Submission itself (the caller's views by pointer, nothing per
/// thread); a group's members and their copied views live in per-thread lists.
class Submission {
 public:
  /// On the set `set_id` of `rt` (throws InvalidArgumentError, naming `what`, if none).
  Submission(const char* what, std::shared_ptr<Runtime> rt, int set_id) : rt_(std::move(rt)) {
    // The global set lives as long as the runtime (held by rt_): no reference to count.
    set_ = set_id == 0 ? rt_->global_set() : nullptr;
    if (!set_) find_set(what, set_id);
  }
  ~Submission() {
    if (room_ != nullptr) release_room();
  }
  Submission(const Submission&) = delete;
  Submission& operator=(const Submission&) = delete;
  Runtime& rt() { return *rt_; }
  ProcessSetState& set() { return *set_; }

  /// Adds `t`, the tensor of a one-tensor call, which the caller keeps (built on its stack,
  /// each field written once) until submit(): its input, which the caller gives up (its shape
  /// becomes the request's: each Shape copy would be a heap allocation, and a tiny tensor's
  /// submission is dominated by them), and its output (null: in place), whose shape the
  /// caller drops once checked (the place's views keep no shape; BatchTensor sizes come from
  /// the agreed response). An unnamed call's name is set here.
  void add(TensorSubmit& t) {
    if (t.name->empty()) t.name = unnamed(t.op, 0);
    items_ = &t;
    n_ = 1;
    checked(t);
  }

  /// Makes room for a group of `n` members (before any add_member()); they are negotiated
  /// and run as a unit.
  void begin_group(size_t n);
  /// Adds a member of a group: a copy of `t`. Only the first of two members of one name is
  /// submitted (names are unique per set); a second one is checked, then dropped.
  TensorSubmit& add_member(OpType op, const std::string& name, const TensorView& t);

  /// Runs a check that throws InvalidArgumentError; a failure is kept (the first one wins)
  /// and reported by submit() on every rank.
  template <typename Fn>
  void check(Fn&& fn) {
    try {
      fn();
    } catch (const InvalidArgumentError& e) {
      note_error(e.what());
    }
  }
  /// Records a local failure: submit() sends the tensors as failed and throws it.
  void note_error(const std::string& why) {
    if (error_.empty()) error_ = why;
  }
  /// Room for an alltoall's splits, moved into its request.
  std::vector<int64_t>* splits() { return &room().splits; }

  /// Numbers unnamed tensors, then submits; a handle named `handle_name` (or the first
  /// tensor's numbered name) completes when every tensor has. Throws the kept local failure
  /// (after sending the tensors as failed), or the table's refusal.
  Handle submit(const std::string& handle_name);
  Handle submit() { return submit(*items_[0].name); }
  /// The state behind the last submit() (for results the public Handle does not expose),
  /// valid while that Handle lives.
  detail::HandleState* state() const { return state_; }

 private:
  /// What only some submissions need, in per-thread lists (taken by room(), emptied by
  /// release_room() for the thread's next submission): a one-tensor call needs none of it
  /// unless it is unnamed or an alltoall.
  struct Room {
    std::vector<TensorSubmit> items;  // a group's members
    std::vector<TensorView> views;    // their copied views
    std::vector<std::string> names;   // unnamed tensors' names
    std::vector<size_t> unnamed;      // which tensors those are
    NameIndex seen;                   // a group's names, for duplicates
    bool seen_used = false;           // `seen` holds this submission's names
    TensorSubmit dropped;             // a group's duplicate member, never submitted
    TensorView dropped_view;
    std::vector<int64_t> splits;  // an alltoall's
    std::string group_key;
  };
  Room& room() {
    if (room_ == nullptr) room_ = &thread_room();
    return *room_;
  }
  static Room& thread_room();
  void release_room();
  void find_set(const char* what, int set_id);

  /// A placeholder name (for messages) for unnamed tensor `index`, numbered at submit().
  const std::string* unnamed(OpType op, size_t index);
  /// The local checks every tensor gets, and a CUDA tensor's device check: inline what
  /// passes, out of line (checked_slow()) what fails or needs the transports.
  void checked(TensorSubmit& t) {
    const TensorView& in = *t.input;
    if (negative_dimension(in.shape) || data_missing(in.data, in.shape) || in.device.is_cuda()) {
      checked_slow(t);
    }
  }
  void checked_slow(TensorSubmit& t);
  /// The group's key (every member carries it).
  std::string group_key() const;
  /// False if `name` was already added to this group.
  bool unique_name(const std::string& name);

  std::shared_ptr<Runtime> rt_;
  ProcessSetState* set_ = nullptr;
  std::shared_ptr<ProcessSetState> held_set_;  // a set other than the global one
  TensorSubmit* items_ = nullptr;              // the tensors to submit
  size_t n_ = 0;
  Room* room_ = nullptr;  // null until needed
  bool grouped_ = false;
  std::string error_;  // the first local failure; empty if none
  detail::HandleState* state_ = nullptr;
};

}  // namespace hvd
