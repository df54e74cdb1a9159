// Copyright horovod_cpp authors. Completion of asynchronous TensorFlow kernels.
//
// A TensorFlow AsyncOpKernel must not block its executor thread until the collective is done.
// The public hvd::Handle can be polled and waited on with a timeout; this file turns that into
// a callback: one completion thread per process watches every pending handle the kernels hand
// it and runs each kernel's continuation (which calls TensorFlow's `done`) once its handle has
// completed, successfully or not. Only the public API (horovod_cpp/*.h) is used.
#pragma once

#include <functional>

#include <horovod_cpp/handle.h>

namespace hvd_tf {

/// Runs `on_done(handle)` on the completion thread once `handle` has completed. The callback
/// must not throw; it is run exactly once.
void when_done(hvd::Handle handle, std::function<void(const hvd::Handle&)> on_done);

/// Runs `work` on a thread of its own (for the blocking calls join() and barrier(), which have
/// no handle); `work` must not throw.
void run_detached(std::function<void()> work);

}  // namespace hvd_tf
