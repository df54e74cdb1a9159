// Copyright horovod_cpp authors. Who runs a process set's cycles, and when: its background
// thread, or a user thread waiting on one of the set's handles.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "core/cycle.h"
#include "core/handle_state.h"
#include "core/tensor_table.h"

namespace hvd {

/// A cycle is run by whichever thread holds `cycle_mu_`: the background thread (loop()), or a
/// user thread waiting on a handle (try_drive(), through detail::CycleDriver), which saves the
/// two thread hand-offs of a small collective. The background thread lets a burst of
/// submissions settle before its cycle, polls briefly when idle before it sleeps, and parks
/// while user threads drive.
class Scheduler {
 public:
  Scheduler(TensorTable* table, Cycle* cycle) : table_(table), cycle_(cycle) {}
  ~Scheduler();  ///< shutdown()
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  /// Starts the background thread.
  void start();
  /// Asks the set to stop (the table's request_shutdown()), then waits for the thread and for
  /// user threads still leaving try_drive().
  void shutdown();

  /// detail::CycleDriver's three calls, for the set.
  detail::CycleDriver::Drive try_drive();
  void begin_driving() { drivers_.fetch_add(1, std::memory_order_acq_rel); }
  void end_driving();

 private:
  void run_thread();  ///< the thread's body: loop(), and a fatal stop if anything throws
  void loop();
  void settle() const;
  /// One cycle with `cycle_mu_` held, an exception turned into a fatal stop (never throws).
  bool guarded_cycle();

  TensorTable* table_;
  Cycle* cycle_;
  std::mutex cycle_mu_;          // held while running a cycle, by the background or a user thread
  std::atomic<int> drivers_{0};  // user threads trying to drive cycles (try_drive())
  std::thread thread_;

  /// How long an idle background thread polls for new work before it sleeps.
  static constexpr std::chrono::microseconds kIdleSpin{50};
  /// A burst of submissions is over when none came for kSettle (or a thread waits on a
  /// handle); the background thread waits at most kSettleMax for that before its cycle.
  /// It polls for the first kSettleSpin, then naps kSettle at a time.
  static constexpr std::chrono::microseconds kSettle{5};
  static constexpr std::chrono::microseconds kSettleSpin{2};
  static constexpr std::chrono::microseconds kSettleMax{100};
};

}  // namespace hvd
