// Copyright horovod_cpp authors. StepGuard: stale-synchronous pacing of independent steps.
#include <memory>
#include <string>
#include <utility>

#include "horovod_cpp/errors.h"
#include "horovod_cpp/training.h"
#include "training/in_flight.h"

namespace hvd {

// ------------------------------------------------------------------------------------------
// StepGuard

StepGuard::StepGuard(int staleness, std::string name, std::chrono::milliseconds timeout)
    : staleness_(staleness), name_(std::move(name)), timeout_(timeout) {
  if (staleness < 0) {
    throw InvalidArgumentError("StepGuard '" + name_ + "': staleness must be >= 0, got " + std::to_string(staleness));
  }
  bufs_ = new std::vector<int64_t>(static_cast<size_t>(staleness) + 1, 0);
  handles_.resize(static_cast<size_t>(staleness) + 1);
}

StepGuard::~StepGuard() {
  // An announcement still in flight writes into bufs_ when the other ranks get there: parked
  // until then rather than block in a destructor (call finish() to avoid this).
  detail::park(handles_, std::shared_ptr<void>(bufs_, [](void* b) { delete static_cast<std::vector<int64_t>*>(b); }));
}

int64_t StepGuard::step() {
  if (finished_) throw InvalidArgumentError("StepGuard '" + name_ + "': step() after finish()");
  const int64_t period = staleness_ + 1;
  const int64_t t = steps_;
  const size_t slot = static_cast<size_t>(t % period);
  (*bufs_)[slot] = 1;
  AllreduceOptions ao;
  ao.op = ReduceOp::kSum;
  handles_[slot] = allreduce_async(name_ + "." + std::to_string(slot),
                                   TensorView(&(*bufs_)[slot], DataType::kInt64, Shape{1}), ao);
  ++steps_;
  const int64_t must = t - staleness_;  // every rank must have started this step
  if (must >= known_) {
    const Handle& h = handles_[static_cast<size_t>(must % period)];
    if (timeout_.count() > 0) {
      h.wait(timeout_);
    } else {
      h.wait();
    }
    known_ = must + 1;
  }
  // Learn more without waiting: later announcements that have already completed.
  while (known_ < steps_ && handles_[static_cast<size_t>(known_ % period)].poll()) {
    handles_[static_cast<size_t>(known_ % period)].wait();  // rethrows a failure
    ++known_;
  }
  return t;
}

int StepGuard::finish() {
  finished_ = true;
  // Our announcements first: each completes once every rank has made it or joined (a rank
  // with fewer steps: the others reach its last steps; the rank with the most: the others have
  // joined), so nothing of ours is in flight when we join.
  for (; known_ < steps_; ++known_) {
    const Handle& h = handles_[static_cast<size_t>(known_ % (staleness_ + 1))];
    if (timeout_.count() > 0) {
      h.wait(timeout_);
    } else {
      h.wait();
    }
  }
  return join();
}

int64_t StepGuard::slowest_started() const { return known_; }

}  // namespace hvd
