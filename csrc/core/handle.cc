// Copyright horovod_cpp authors.
#include <atomic>
#include <chrono>
#include <thread>

#include "core/handle_state.h"
#include "horovod_cpp/handle.h"

namespace hvd {
namespace detail {

void HandleState::complete(const Status& status) {
  std::unique_lock<std::mutex> lk(mu_);
  if (!status.ok() && status_.ok()) status_ = status;
  if (--remaining_ > 0) return;
  done_.store(true, std::memory_order_release);
  if (sleepers_ == 0) return;  // the waiters still spinning see done_ without a wake-up
  // Notified after unlocking: a waiter woken under the lock would only block on it again.
  // The caller holds a reference, so the state outlives this call.
  lk.unlock();
  cv_.notify_all();
}

namespace {
std::atomic<int> g_threads_waiting{0};

struct WaitingThread {  // counts this thread in g_threads_waiting while it lives
  // Release/acquire: whoever sees this thread waiting also sees it registered as a driver.
  WaitingThread() { g_threads_waiting.fetch_add(1, std::memory_order_release); }
  ~WaitingThread() { g_threads_waiting.fetch_sub(1, std::memory_order_relaxed); }
};
}  // namespace

int threads_waiting() { return g_threads_waiting.load(std::memory_order_acquire); }

void HandleState::drive(CycleDriver* d) {
  while (!done() && d->try_drive() == CycleDriver::Drive::kRan) {
  }
  d->end_driving();
}

bool HandleState::wait_until(std::chrono::steady_clock::time_point deadline) {
  if (done()) return true;
  const bool untimed = deadline == std::chrono::steady_clock::time_point::max();
  // The caller runs the cycles itself while it can: no hand-off to the background thread and
  // no wake-up back. When another thread holds the cycle (or nothing is left to negotiate on
  // this rank), it falls back to waiting for whoever completes the handle. It announces
  // itself as a driver before it counts as waiting: a background thread that sees a waiter
  // (and so stops letting a burst settle) then also sees the driver, and parks instead of
  // taking the cycle.
  std::shared_ptr<CycleDriver> d = untimed ? driver_.lock() : nullptr;
  if (d) d->begin_driving();
  WaitingThread counted;
  if (d) drive(d.get());
  // A short spin first: small collectives finish within microseconds, and a futex sleep and
  // wake would cost more than the collective itself.
  auto spin_end = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
  while (!done()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= spin_end || now >= deadline) break;
    std::this_thread::yield();
    if (untimed && !done()) {
      // The thread that held the cycle may be done with it while this handle still needs
      // another (its tensor was not ready on every rank yet).
      if (d && d->try_drive() == CycleDriver::Drive::kRan) {
        d->begin_driving();
        drive(d.get());
        spin_end = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
      }
    }
  }
  if (done()) return true;
  d.reset();  // a sleeping waiter does not keep the set alive
  std::unique_lock<std::mutex> lk(mu_);
  ++sleepers_;
  const bool done_in_time = cv_.wait_until(lk, deadline, [this] { return done(); });
  --sleepers_;
  return done_in_time;
}

void HandleState::wait() { wait_until(std::chrono::steady_clock::time_point::max()); }

}  // namespace detail

namespace {
const detail::HandleState& must(const std::shared_ptr<detail::HandleState>& s) {
  if (!s) throw InvalidArgumentError("hvd::Handle: this handle refers to no operation");
  return *s;
}
}  // namespace

bool Handle::poll() const { return must(state_).done(); }

void Handle::wait() const {
  must(state_);
  state_->wait();
  throw_if_error(state_->status());
}

bool Handle::wait_for(std::chrono::milliseconds timeout) const {
  must(state_);
  if (!state_->wait_until(std::chrono::steady_clock::now() + timeout)) return false;
  throw_if_error(state_->status());
  return true;
}

void Handle::wait(std::chrono::milliseconds timeout) const {
  if (!wait_for(timeout)) {
    throw TimeoutError("'" + state_->name() + "' did not complete within " +
                       std::to_string(timeout.count()) + " ms (it is still pending)");
  }
}

void Handle::wait_up_to(std::chrono::milliseconds timeout) const {
  if (timeout.count() > 0) {
    wait(timeout);
  } else {
    wait();
  }
}

ErrorCode Handle::error_code() const {
  return must(state_).done() ? state_->status().code() : ErrorCode::kOk;
}

std::string Handle::error_message() const {
  return must(state_).done() ? state_->status().message() : std::string();
}

Tensor Handle::result() const {
  wait();
  if (state_->results().empty()) {
    throw InvalidArgumentError("'" + state_->name() + "' has no result tensor (only allgather, "
                               "alltoall and reducescatter allocate one)");
  }
  return state_->results().front();
}

std::vector<Tensor> Handle::results() const {
  wait();
  return state_->results();
}

std::vector<int64_t> Handle::received_splits() const {
  wait();
  if (state_->splits().empty()) {
    throw InvalidArgumentError("'" + state_->name() + "' is not an alltoall: no received splits");
  }
  return state_->splits().front();
}

const std::string& Handle::name() const { return must(state_).name(); }

}  // namespace hvd
