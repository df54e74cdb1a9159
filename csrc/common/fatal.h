// Copyright horovod_cpp authors. Ending the job after a fatal condition, instead of hanging.
//
// Some failures leave the ranks unable to finish together: a stall shutdown (a rank is stuck
// in its own code), a failed coordination (a message could not be decoded, an MPI error in
// the negotiation), an aborted communicator. A rank that went on to MPI_Finalize, or into
// another collective, would wait for the stuck rank forever. So such a failure is recorded
// here, process-wide (it must outlive the Runtime: Python's exit handlers shut horovod_cpp
// down before the C library's run), and the job is ended with MPI_Abort:
//  - at process exit (before MPI_Finalize), if the failure is still pending;
//  - by a watchdog, HOROVOD_CPP_ABORT_GRACE_SECONDS after the failure (0: no watchdog),
//    whatever the program is doing.
// A successful hvd::init() on every rank (which needs every rank alive and responsive)
// clears it: a program whose ranks are all still running can shut down and start again.
// A program that wants to save a checkpoint first catches the error, saves, and exits
// (or sets a longer grace). docs/errors.md describes this for users.
#pragma once

#include <string>

namespace hvd {

/// How the job is ended, installed by the World that started it (transport/factory: MPI_Abort,
/// which ends every rank). `rank` names this rank in the last message (-1: unknown). Without an
/// aborter, only this process ends (exit status 1).
struct JobAborter {
  int (*rank)() = nullptr;
  void (*abort)() = nullptr;
};
void set_job_aborter(JobAborter aborter);

/// Sets the watchdog's grace (HOROVOD_CPP_ABORT_GRACE_SECONDS; <= 0: no watchdog, the job
/// still ends at exit). Called by every hvd::init().
void set_fatal_grace(double grace_seconds);

/// Records a fatal condition and logs one ERROR line with `reason` (which names the ranks).
/// Starts a watchdog that ends the job the grace from now unless clear_fatal() comes first.
/// Any thread may call it; the first reason is kept until clear_fatal().
void report_fatal(const std::string& reason);

/// Forgets a pending fatal condition (every rank has re-initialized).
void clear_fatal();

/// The pending fatal condition, empty if none.
std::string pending_fatal();

/// When a fatal condition is pending: logs that the job ends and why, then the job aborter (never
/// returns). Otherwise does nothing. `where` says who asks, e.g. "at exit".
void abort_if_fatal(const char* where);

}  // namespace hvd
