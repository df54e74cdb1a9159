// Copyright horovod_cpp authors.
#include "common/fatal.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "common/logging.h"

namespace hvd {
namespace {

// Never destroyed: a watchdog thread or an exit handler may use it while statics are torn down.
struct FatalState {
  std::mutex mu;
  std::condition_variable cv;
  std::string reason;          // guarded by mu; empty: nothing pending
  uint64_t generation = 0;     // guarded by mu; bumped by every report and clear
  double grace_seconds = 5.0;  // guarded by mu
  JobAborter aborter;          // guarded by mu
};
FatalState& state() {
  static FatalState* s = new FatalState();
  return *s;
}

[[noreturn]] void end_job(const std::string& reason, const char* where) {
  // One line to stderr whatever the log level, then the aborter ends every rank of the job.
  JobAborter a;
  {
    std::lock_guard<std::mutex> lk(state().mu);
    a = state().aborter;
  }
  const int rank = a.rank ? a.rank() : -1;
  std::fprintf(stderr, "[horovod_cpp] rank %d: ending the job %s: %s\n", rank, where,
               reason.c_str());
  std::fflush(stderr);
  if (a.abort) a.abort();
  std::_Exit(1);
}

}  // namespace

void set_job_aborter(JobAborter aborter) {
  FatalState& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  s.aborter = aborter;
}

void set_fatal_grace(double grace_seconds) {
  FatalState& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  s.grace_seconds = grace_seconds;
}

void report_fatal(const std::string& reason) {
  FatalState& s = state();
  uint64_t gen;
  double grace_seconds;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    if (!s.reason.empty()) return;  // the first reason is the one reported
    s.reason = reason;
    gen = ++s.generation;
    grace_seconds = s.grace_seconds;
  }
  HVD_LOG(kError) << "fatal: " << reason << " -- the job ends at exit"
                  << (grace_seconds > 0 ? " or in " + seconds_str(grace_seconds) +
                                              " (HOROVOD_CPP_ABORT_GRACE_SECONDS)"
                                        : std::string())
                  << " unless every rank calls hvd::init() again first";
  if (grace_seconds <= 0) return;
  std::thread([gen, grace_seconds] {
    FatalState& st = state();
    std::unique_lock<std::mutex> lk(st.mu);
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(grace_seconds));
    st.cv.wait_until(lk, deadline, [&] { return st.generation != gen; });
    if (st.generation != gen || st.reason.empty()) return;
    const std::string reason = st.reason;
    lk.unlock();
    end_job(reason,
            ("after " + seconds_str(grace_seconds) + " (HOROVOD_CPP_ABORT_GRACE_SECONDS)")
                .c_str());
  }).detach();
}

void clear_fatal() {
  FatalState& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  if (s.reason.empty()) return;
  s.reason.clear();
  ++s.generation;
  s.cv.notify_all();
}

std::string pending_fatal() {
  FatalState& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  return s.reason;
}

void abort_if_fatal(const char* where) {
  const std::string reason = pending_fatal();
  if (!reason.empty()) end_job(reason, where);
}

}  // namespace hvd
