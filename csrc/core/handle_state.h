// Copyright horovod_cpp authors. The shared state behind a public hvd::Handle.
//
// Written once by the background thread (complete), read by any number of user threads.
// A grouped operation has one state for all its tensors: it completes when the last part
// does, with the first failure if any.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "horovod_cpp/tensor.h"

namespace hvd {
namespace detail {

/// How many threads are inside a handle's wait right now (all handles of the process). The
/// background threads read it to tell a burst of submissions (nobody waits yet: let it
/// finish and take it in one cycle) from a caller blocked on a result (run at once).
int threads_waiting();

/// Lets a thread that waits on a handle run its process set's negotiation cycles itself,
/// instead of handing the work to the set's background thread and being woken by it: two
/// thread hand-offs (each a context switch when threads outnumber cores) are most of the
/// cost of a small collective. Implemented by the process set.
class CycleDriver {
 public:
  enum class Drive {
    kRan,     ///< this thread ran one cycle
    kBusy,    ///< another thread is running a cycle now
    kIdle,    ///< this rank has nothing in flight (the handle completes elsewhere)
    kStopped  ///< the set has stopped
  };
  virtual ~CycleDriver() = default;
  /// Runs one cycle on the calling thread if no other thread runs one and this rank has work
  /// in flight. Never throws: a failure stops the set and fails its pending handles.
  virtual Drive try_drive() = 0;
  /// Brackets a waiting thread's attempts to drive: while any thread drives, the background
  /// thread leaves the cycles to it, and takes over again when the last one stops.
  virtual void begin_driving() = 0;
  virtual void end_driving() = 0;
};

class HandleState {
 public:
  HandleState(std::string name, int parts) : name_(std::move(name)), remaining_(parts), parts_(parts) {}

  const std::string& name() const { return name_; }
  /// The set whose cycles an untimed wait may run (before the handle is published).
  void set_driver(const std::weak_ptr<CycleDriver>& driver) { driver_ = driver; }
  bool done() const { return done_.load(std::memory_order_acquire); }

  /// Completes one part; the whole once every part has completed.
  void complete(const Status& status);
  /// Stores the library-allocated result of part `index` (before that part's complete()).
  /// Parts of one handle may be completed by different threads (a transport's own thread).
  void set_result(int index, Tensor t) {
    std::lock_guard<std::mutex> lk(mu_);
    results_.resize(static_cast<size_t>(parts_));  // allocated only by ops with results
    results_[static_cast<size_t>(index)] = std::move(t);
  }
  /// Alltoall: the rows part `index` received from each rank.
  void set_splits(int index, std::vector<int64_t> s) {
    std::lock_guard<std::mutex> lk(mu_);
    splits_.resize(static_cast<size_t>(parts_));
    splits_[static_cast<size_t>(index)] = std::move(s);
  }
  /// A scalar outcome (join: the last rank to join).
  void set_value(int64_t v) { value_ = v; }

  /// Waits until done or `deadline`; false on expiry. An untimed wait (deadline max) runs the
  /// set's cycles on this thread while it can (CycleDriver); a timed one never does, since a
  /// cycle waits for the other ranks and could overrun the deadline.
  bool wait_until(std::chrono::steady_clock::time_point deadline);
  void wait();
  /// Valid once done().
  const Status& status() const { return status_; }
  const std::vector<Tensor>& results() const { return results_; }
  const std::vector<std::vector<int64_t>>& splits() const { return splits_; }
  int64_t value() const { return value_; }

 private:
  /// Runs cycles until done or `d` cannot (busy, idle, stopped), then ends driving (the
  /// caller has called d->begin_driving()).
  void drive(CycleDriver* d);

  std::string name_;
  std::weak_ptr<CycleDriver> driver_;  // written before the handle is published
  std::mutex mu_;
  std::condition_variable cv_;
  int remaining_;
  int sleepers_ = 0;  ///< threads waiting on cv_ (guarded by mu_): complete() wakes only those
  const int parts_;
  Status status_;
  std::vector<Tensor> results_;
  std::vector<std::vector<int64_t>> splits_;
  int64_t value_ = -1;
  std::atomic<bool> done_{false};
};

}  // namespace detail
}  // namespace hvd
