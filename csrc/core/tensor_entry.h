// Copyright horovod_cpp authors. A submission as the API hands it to a process set's table,
// and what the table keeps of each submitted tensor.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "coordination/message.h"
#include "coordination/response_check.h"
#include "core/handle_state.h"
#include "horovod_cpp/tensor.h"

namespace hvd {

/// What the runtime's table keeps of a submitted tensor, from submission until the executor
/// runs its response; the user keeps the memory behind `input` and `output` alive until then.
/// Kept small (about two cache lines): a step of a thousand tiny tensors writes a thousand of
/// them, and the request (names, shapes) goes to the negotiation instead.
struct PendingTensor {
  PendingTensor() {}               // NOLINT(modernize-use-equals-default): see TensorSubmit()
  OpType op = OpType::kAllreduce;  ///< for messages about a tensor still in the table
  TensorView input;
  TensorView output;  ///< == input for in-place operations; unused by allgather
  std::shared_ptr<detail::HandleState> handle;
  int part = 0;            ///< index of this tensor in its handle (grouped operations)
  int64_t enqueue_us = 0;  ///< when it was submitted (timeline)
  /// What the request asked for beyond op, dtype and device (the views keep no shape), made
  /// when the request is sent in full (TensorTable::note_sent()): a fresh response is checked
  /// against it before anything is sized from it.
  RequestDigest asked;

  /// The request as check_response_against_request() sees it.
  AskedFor asked_for() const { return {op, input.dtype, input.device, asked}; }
};

/// One tensor of a submission: the caller's checked arguments, by pointer where they are
/// big. The table writes each field once, straight into the negotiation's request and the
/// tensor's place (docs/design.md, "the path of one tensor"): nothing is built first and
/// moved. A submission of one tensor is a one-element submission.
struct TensorSubmit {
  /// User-provided on purpose: value- or aggregate-initialization of an implicit constructor
  /// first zeroes the whole object (a `rep stos`) before the member initializers run.
  TensorSubmit() {}  // NOLINT(modernize-use-equals-default)
  TensorSubmit(OpType op_, const std::string* name_, TensorView* input_, TensorView* output_)
      : op(op_), name(name_), input(input_), output(output_) {}
  OpType op = OpType::kAllreduce;
  const std::string* name = nullptr;  ///< never empty (unnamed calls are numbered first)
  TensorView* input = nullptr;        ///< moved from; its shape becomes the request's
  TensorView* output = nullptr;       ///< copied (its shape already dropped); null: in place
  ReduceOp reduce_op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t root = 0;                        ///< broadcast: the root's global rank
  std::vector<int64_t>* splits = nullptr;  ///< alltoall: moved into the request; null: none
};

/// What every tensor of one submission shares.
struct SubmitCommon {
  SubmitCommon() {}  // NOLINT(modernize-use-equals-default): see TensorSubmit()
  /// The handle the tensors complete (tensor i is its part i); moved into the last place.
  std::shared_ptr<detail::HandleState> handle;
  int64_t enqueue_us = 0;              ///< when (timeline), or 0
  const std::string* group = nullptr;  ///< a grouped call's key; null: not grouped
  const std::string* error = nullptr;  ///< a local failure sent with every tensor; null: none
};

}  // namespace hvd
