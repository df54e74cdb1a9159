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
/// Sets `q`'s reduction; throws InvalidArgumentError if its dtype and device cannot take it.
void set_reduction(TensorSubmit& q, ReduceOp op, double pre, double post);
/// Throws InvalidArgumentError for a scalar (collectives that split or stack dimension 0).
void check_not_scalar(const TensorSubmit& q);

/// One submission being built: the runtime, the target set and its tensors, then submit(),
/// the one route into the set's table (ProcessSetState::enqueue) for every call. A call of
/// one tensor keeps it in the Submission itself (the caller's views by pointer, nothing per
/// thread); a group's members and their copied views live in per-thread lists.
class Submission {
 public:
  /// On the set `set_id` of `rt` (throws InvalidArgumentError, naming `what`, if none).
  Submission(const char* what, std::shared_ptr<Runtime> rt, int set_id);
  ~Submission();
  Submission(const Submission&) = delete;
  Submission& operator=(const Submission&) = delete;
  Runtime& rt() { return *rt_; }
  ProcessSetState& set() { return *set_; }

  /// Adds the tensor of a one-tensor call: `in`, which the caller gives up (its shape becomes
  /// the request's: each Shape copy would be a heap allocation, and a tiny tensor's
  /// submission is dominated by them), and `out` (null: in place), whose shape the caller
  /// drops once checked (the place's views keep no shape; BatchTensor sizes come from the
  /// agreed response). Returns it for the caller to complete and check.
  TensorSubmit& add(OpType op, const std::string& name, TensorView* in, TensorView* out) {
    one_ = TensorSubmit(op, name_for(op, name, &one_name_, 0), in, out);
    items_ = &one_;
    n_ = 1;
    checked(one_);
    return one_;
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
  std::vector<int64_t>* splits() { return &splits_; }

  /// Numbers unnamed tensors, then submits; a handle named `handle_name` (or the first
  /// tensor's numbered name) completes when every tensor has. Throws the kept local failure
  /// (after sending the tensors as failed), or the table's refusal.
  Handle submit(const std::string& handle_name);
  Handle submit() { return submit(*items_[0].name); }
  /// The state behind the last submit() (for results the public Handle does not expose),
  /// valid while that Handle lives.
  detail::HandleState* state() const { return state_; }

 private:
  /// A group's per-thread lists.
  struct GroupRoom {
    std::vector<TensorSubmit> items;
    std::vector<TensorView> views;   // the members' copied views
    std::vector<std::string> names;  // unnamed members' names
    std::vector<size_t> unnamed;     // which members those are
    NameIndex seen;                  // the members' names, for duplicates
    bool seen_used = false;          // `seen` holds this submission's names
  };
  static GroupRoom& group_room();

  /// The tensor's name: `name`, or for an unnamed call a placeholder (for messages) in
  /// `*storage` (null: a group's, for its member `index`), numbered at submit().
  const std::string* name_for(OpType op, const std::string& name, std::string* storage,
                              size_t index);
  /// The local checks every tensor gets, and a CUDA tensor's device check.
  void checked(TensorSubmit& t);
  /// The group's key (every member carries it).
  std::string group_key() const;
  /// False if `name` was already added to this group.
  bool unique_name(const std::string& name);

  std::shared_ptr<Runtime> rt_;
  ProcessSetState* set_ = nullptr;
  std::shared_ptr<ProcessSetState> held_set_;  // a set other than the global one
  TensorSubmit one_;                           // a one-tensor call's tensor
  std::string one_name_;                       // its placeholder, then number, if unnamed
  TensorSubmit* items_ = nullptr;              // the tensors to submit
  size_t n_ = 0;
  GroupRoom* room_ = nullptr;  // a group's lists; null for one tensor
  TensorSubmit dropped_;       // a group's duplicate member, never submitted
  TensorView dropped_view_;
  std::vector<int64_t> splits_;
  std::string group_key_;
  std::string error_;  // the first local failure; empty if none
  detail::HandleState* state_ = nullptr;
};

}  // namespace hvd
