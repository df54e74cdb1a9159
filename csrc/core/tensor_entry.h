// Copyright horovod_cpp authors. A submitted tensor, waiting in the runtime's table.
#pragma once

#include <memory>

#include "coordination/message.h"
#include "core/handle_state.h"
#include "horovod_cpp/tensor.h"

namespace hvd {

/// Owned by the runtime's table from submission until the background thread executes its
/// response; the user keeps the memory behind `input` and `output` alive until then.
struct TensorEntry {
  /// User-provided on purpose: `emplace_back()` value-initializes, which for an implicit
  /// constructor first zeroes all ~400 bytes (a `rep stos`, ~2% of a tiny tensor's cycles in
  /// workload d) before the member initializers run.
  TensorEntry() {}  // NOLINT(modernize-use-equals-default)
  /// Built by the API; enqueue() moves it to the background thread, after which only
  /// `request.op` is still valid in the table (the table's key is the name).
  Request request;
  TensorView input;
  TensorView output;  ///< == input for in-place operations; unused by allgather
  std::shared_ptr<detail::HandleState> handle;
  int part = 0;  ///< index of this tensor in its handle (grouped operations)
  int64_t enqueue_us = 0;  ///< when it was submitted (timeline)
};

}  // namespace hvd
