// Copyright horovod_cpp authors.
#include "core/scheduler.h"

#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <time.h>

#include <algorithm>
#include <string>

#include "common/fatal.h"

namespace hvd {

Scheduler::~Scheduler() {
  shutdown();
}

void Scheduler::start() {
  thread_ = std::thread([this] { run_thread(); });
}

void Scheduler::run_thread() {
  try {
    loop();
  } catch (...) {
    cycle_->fail("the background thread of global rank " + std::to_string(cycle_->global_rank()) +
                 " failed: " + describe_current_exception());
  }
}

void Scheduler::shutdown() {
  table_->request_shutdown();
  if (thread_.joinable()) thread_.join();
  // A user thread may still be leaving try_drive() (it finds the set stopped at once): the
  // set must not tear down the planes under it.
  while (drivers_.load(std::memory_order_acquire) > 0) std::this_thread::yield();
}

// Called with new requests queued: while a user thread is still submitting tensors one call
// at a time (and nobody waits on a handle yet), let it finish, so that the burst is
// negotiated in one cycle. Cycling during the burst would cost a negotiation per few tensors
// and make the submitting thread contend with this one for the table.
void Scheduler::settle() const {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto last_change = start;
  uint64_t seen = table_->enqueued();
  while (detail::threads_waiting() == 0) {
    const auto now = clock::now();
    const uint64_t n = table_->enqueued();
    if (n != seen) {
      seen = n;
      last_change = now;
    } else if (now - last_change >= kSettle) {
      return;
    }
    if (now - start >= kSettleMax) return;
    if (now - start < kSettleSpin) {
      std::this_thread::yield();
    } else {
      // Sleep, not spin: the submitting thread (and, with several ranks per core, the other
      // ranks) need the CPU more than this thread does.
      timespec ts{0, static_cast<long>(std::chrono::nanoseconds(kSettle).count())};
      nanosleep(&ts, nullptr);
    }
  }
}

void Scheduler::loop() {
#ifdef __linux__
  // Short sleeps (settle()) should last about what they ask, not the default 50 us slack.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
#endif
  // The idle heartbeat starts at HOROVOD_CYCLE_TIME and doubles while nothing happens, up to
  // 32 times that: an idle job costs almost no CPU, and work still wakes the thread at once.
  using ms = std::chrono::duration<double, std::milli>;
  TensorTable& t = *table_;
  auto idle = ms(cycle_->cycle_time_ms());
  while (!t.stopped()) {
    const auto base_idle = ms(cycle_->cycle_time_ms());  // the autotuner may change it
    if (t.has_new()) settle();
    bool for_work;  // false: the idle heartbeat, a cycle that other ranks' cycles may need
    {
      std::unique_lock<std::mutex> lk(t.mu_);
      // Sleep only when this rank has nothing in flight: new work wakes us at once, and the
      // timeout is the heartbeat that lets other ranks' cycles complete.
      const auto has_work = [&t] { return !t.new_requests_.empty() || t.shutdown_requested_; };
      if (t.new_requests_.empty() && t.pending_count_ == 0 && !t.shutdown_requested_) {
        // Poll first, without the lock: the next submission usually comes within
        // microseconds, and waking a sleeping thread costs more than the collective itself.
        lk.unlock();
        const auto spin_end = std::chrono::steady_clock::now() + kIdleSpin;
        while (!t.has_new() && std::chrono::steady_clock::now() < spin_end) {
          std::this_thread::yield();  // two ranks may share a core: let the other one run
        }
        if (t.has_new()) settle();
        lk.lock();
        bool woken = has_work();
        if (!woken) {
          t.sleeping_ = true;
          woken = t.wake_.wait_for(lk, idle, has_work);
          t.sleeping_ = false;
          if (woken && !t.shutdown_requested_) {
            lk.unlock();
            settle();
            lk.lock();
          }
        }
        idle = woken ? base_idle : std::min(idle * 2, base_idle * 32);
      } else {
        idle = base_idle;
      }
      // A user thread waiting on a handle runs the cycles itself (try_drive()): leave them to
      // it, and take over when it stops (end_driving() wakes this thread) or on the heartbeat.
      if (drivers_.load(std::memory_order_acquire) > 0 && !t.shutdown_requested_) {
        t.parked_ = true;
        t.wake_.wait_for(lk, base_idle, [this, &t] {
          return drivers_.load(std::memory_order_acquire) == 0 || t.shutdown_requested_;
        });
        t.parked_ = false;
        continue;
      }
      for_work = t.has_work_locked();
    }
    std::lock_guard<std::mutex> cl(cycle_mu_);
    if (t.stopped()) return;
    if (for_work) {
      // A user thread may have run the cycles this work needed while we waited for the lock.
      std::lock_guard<std::mutex> lk(t.mu_);
      if (!t.has_work_locked()) continue;
    }
    if (!guarded_cycle()) return;
  }
}

namespace {
// The cycle this thread is running, if any: a wait inside a cycle (none today) must not try
// to run another, which would lock cycle_mu_ twice.
thread_local bool t_in_cycle = false;
struct InCycle {
  InCycle() { t_in_cycle = true; }
  ~InCycle() { t_in_cycle = false; }
};
}  // namespace

bool Scheduler::guarded_cycle() {
  InCycle in_cycle;
  try {
    return cycle_->run();
  } catch (...) {
    cycle_->fail("a cycle run by " +
                 std::string(std::this_thread::get_id() == thread_.get_id()
                                 ? "the background thread"
                                 : "a user thread waiting on a handle") +
                 " of global rank " + std::to_string(cycle_->global_rank()) +
                 " failed: " + describe_current_exception());
    return false;
  }
}

detail::CycleDriver::Drive Scheduler::try_drive() {
  using Drive = detail::CycleDriver::Drive;
  if (t_in_cycle) return Drive::kBusy;
  std::unique_lock<std::mutex> cl(cycle_mu_, std::try_to_lock);
  if (!cl.owns_lock()) return Drive::kBusy;
  if (table_->stopped()) return Drive::kStopped;
  {
    std::lock_guard<std::mutex> lk(table_->mu_);
    if (!table_->has_work_locked()) return Drive::kIdle;
  }
  return guarded_cycle() ? Drive::kRan : Drive::kStopped;
}

void Scheduler::end_driving() {
  if (drivers_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  // The last driver stopped: the background thread takes over what is left (under the
  // table's lock, so a thread about to park cannot miss it). With nothing left it need not
  // wake: its park ends on the heartbeat anyway, and a wake-up would cost this thread a
  // system call.
  std::lock_guard<std::mutex> lk(table_->mu_);
  if ((table_->parked_ || table_->sleeping_) && table_->has_work_locked()) {
    table_->wake_.notify_one();
  }
}

}  // namespace hvd
