// Copyright horovod_cpp authors. A submitted tensor, waiting in the runtime's table.
#pragma once

#include <memory>

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
  PendingTensor() {}  // NOLINT(modernize-use-equals-default): see TensorEntry()
  OpType op = OpType::kAllreduce;  ///< for messages about a tensor still in the table
  TensorView input;
  TensorView output;  ///< == input for in-place operations; unused by allgather
  std::shared_ptr<detail::HandleState> handle;
  int part = 0;            ///< index of this tensor in its handle (grouped operations)
  int64_t enqueue_us = 0;  ///< when it was submitted (timeline)
  /// What the request asked for beyond op, dtype and device (the views keep no shape): a
  /// fresh response is checked against it before anything is sized from it.
  RequestDigest asked;

  /// The request as check_response_against_request() sees it.
  AskedFor asked_for() const { return {op, input.dtype, input.device, asked}; }
};

/// A tensor as the API builds it: its request, and what the table keeps. enqueue() moves the
/// request to the negotiation and the rest into the table.
struct TensorEntry : PendingTensor {
  /// User-provided on purpose: `emplace_back()` value-initializes, which for an implicit
  /// constructor first zeroes all ~400 bytes (a `rep stos`, ~2% of a tiny tensor's cycles in
  /// workload d) before the member initializers run.
  TensorEntry() {}  // NOLINT(modernize-use-equals-default)
  Request request;
};

}  // namespace hvd
