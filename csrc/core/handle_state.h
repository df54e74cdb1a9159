// Copyright horovod_cpp authors. The shared state behind a public hvd::Handle.
//
// Written once by the background thread (complete), read by any number of user threads.
// A grouped operation has one state for all its tensors: it completes when the last part
// does, with the first failure if any.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>

#include "common/status.h"
#include "horovod_cpp/tensor.h"

namespace hvd {
namespace detail {

class HandleState {
 public:
  HandleState(std::string name, int parts) : name_(std::move(name)), remaining_(parts) {}

  const std::string& name() const { return name_; }
  bool done() const { return done_.load(std::memory_order_acquire); }

  /// Completes one part; the whole once every part has completed.
  void complete(const Status& status);
  /// Stores the library-allocated result (before complete()).
  void set_result(Tensor t) { result_ = std::move(t); }

  /// Waits until done or `deadline`; false on expiry.
  bool wait_until(std::chrono::steady_clock::time_point deadline);
  void wait();
  /// Valid once done().
  const Status& status() const { return status_; }
  const Tensor& result() const { return result_; }

 private:
  std::string name_;
  std::mutex mu_;
  std::condition_variable cv_;
  int remaining_;
  Status status_;
  Tensor result_;
  std::atomic<bool> done_{false};
};

}  // namespace detail
}  // namespace hvd
