// Copyright horovod_cpp authors. How a rank waits for its peers without burning a core.
#pragma once

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <chrono>

namespace hvd {

/// A pause inside a spin loop (lets the sibling hyper-thread run, saves power).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/// The wait between polls of every loop that waits on other ranks (MPI requests, shared-memory
/// flags). It spins for `spin` (peers usually arrive within microseconds), reading the clock
/// only every `poll_mask` + 1 polls; with `yield_core` (ranks outnumber cores) it also yields
/// the core at those polls, so that a peer sharing it can run, and only then: a yield hands
/// the core to any runnable thread for a time slice. After the spin it sleeps with a growing
/// back-off (5 us, doubling, at most 200 us), so a rank waiting for an idle or descheduled
/// peer gives up its core.
///
///   Backoff wait(std::chrono::microseconds(50), 15, yield_core);
///   while (!ready()) wait.pause();
class Backoff {
 public:
  using Clock = std::chrono::steady_clock;

  Backoff(Clock::duration spin, unsigned poll_mask, bool yield_core)
      : start_(Clock::now()), spin_(spin), mask_(poll_mask), yield_core_(yield_core) {}

  /// Call after each poll that found the peer not there yet.
  void pause() {
    if ((++polls_ & mask_) != 0) {
      cpu_relax();
      return;
    }
    elapsed_ = Clock::now() - start_;
    if (elapsed_ < spin_) {
      if (yield_core_) sched_yield();
      return;
    }
    timespec ts{0, sleep_ns_};
    nanosleep(&ts, nullptr);
    sleep_ns_ = std::min(sleep_ns_ * 2, kMaxSleepNs);
  }

  /// Time since construction, as of the last clock read in pause() (for deadlines).
  Clock::duration elapsed() const { return elapsed_; }

  /// True once the wait has lasted kWatchAfter, then at most once per kWatchEvery (as of the
  /// last clock read): when a waiter checks that the peers it waits for still live (a system
  /// call or two, so never in the first microseconds, where peers usually arrive). Costs a
  /// comparison per poll, no clock read.
  bool watch_due() {
    if (elapsed_ < next_watch_) return false;
    next_watch_ = elapsed_ + kWatchEvery;
    return true;
  }
  static constexpr Clock::duration kWatchAfter = std::chrono::milliseconds(20);
  static constexpr Clock::duration kWatchEvery = std::chrono::milliseconds(50);

 private:
  static constexpr long kMaxSleepNs = 200 * 1000;
  const Clock::time_point start_;
  const Clock::duration spin_;
  const unsigned mask_;
  const bool yield_core_;
  unsigned polls_ = 0;
  long sleep_ns_ = 5 * 1000;
  Clock::duration elapsed_{0};
  Clock::duration next_watch_ = kWatchAfter;
};

}  // namespace hvd
