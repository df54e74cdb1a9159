// Copyright horovod_cpp authors. The timeline: a Chrome-trace JSON record of every tensor's
// phases, written by rank 0 (HOROVOD_TIMELINE=path, or start_timeline()).
//
// Events are recorded by the background threads (and user threads, for the queue phase) into
// a buffer under a short lock; a separate writer thread formats and writes them, so the
// background loop never waits for the disk. The file is valid JSON at every moment: it always
// ends with "]", which the writer overwrites before appending and writes again after.
//
// Each tensor is a track (a "thread" named after the tensor); phases are complete ("X")
// events: QUEUE (submitted, waiting for the background thread), NEGOTIATE (until every rank
// submitted it; instant events mark each rank's readiness), then the execution phases
// (MEMCPY_IN_FUSION_BUFFER, the collective, MEMCPY_OUT_FUSION_BUFFER).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/status.h"

namespace hvd {

/// Microseconds on the steady clock (the timeline's time base).
int64_t now_us();

class Timeline {
 public:
  /// Only `rank` 0 records; elsewhere every call is a cheap no-op.
  explicit Timeline(int rank) : rank_(rank) {}
  ~Timeline();

  Status start(const std::string& path, bool mark_cycles);
  void stop();
  /// True while recording (checked before building any event).
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  bool mark_cycles() const { return mark_cycles_.load(std::memory_order_relaxed); }

  /// A phase of `tensor` from begin_us to end_us; `args` is a JSON object body or "".
  void phase(const std::string& tensor, const char* phase, int64_t begin_us, int64_t end_us,
             const std::string& args = "");
  /// A point event on `tensor`'s track.
  void instant(const std::string& tensor, const std::string& what, int64_t at_us);
  /// A cycle marker on the "cycles" track.
  void cycle(int process_set, uint64_t cycle, int64_t at_us);

 private:
  void push(std::string event);
  int track_of(const std::string& tensor);  // under mu_
  void writer();

  const int rank_;
  std::atomic<bool> enabled_{false};
  // Written by start() on a user thread, read by every set's background thread.
  std::atomic<bool> mark_cycles_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> pending_;  // guarded by mu_
  std::unordered_map<std::string, int> tracks_;  // guarded by mu_
  bool stop_writer_ = false;  // guarded by mu_
  std::FILE* file_ = nullptr;  // writer thread only (and start/stop)
  bool first_event_ = true;
  std::thread thread_;
  std::mutex control_mu_;  // serializes start() and stop()
};

}  // namespace hvd
