// Copyright horovod_cpp authors. Tells a rank waiting in shared memory that the peer it waits
// for has died, so that a lost peer fails the wait in moments instead of at its deadline.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "transport/bootstrap.h"

namespace hvd {

/// Whether process `pid` still runs: false when it does not exist (kill() says ESRCH) or has
/// exited and awaits its parent's wait() (a zombie, state Z or X in /proc/<pid>/stat: a peer
/// killed under a launcher that has not reaped it yet still answers kill()).
bool process_alive(pid_t pid);

/// The processes of a set's members, checked by the set's shared-memory wait loops once a
/// wait has lasted a while (Backoff::watch_due()). Off (every check passes) until setup().
class PeerWatch {
 public:
  PeerWatch() = default;
  ~PeerWatch();
  PeerWatch(PeerWatch&& other) noexcept;
  PeerWatch& operator=(PeerWatch&& other) noexcept;
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  /// Collective over `group`: learns every member's pid and turns the watch on when every
  /// member sees every other member's process (kill(pid, 0)), on every member alike. Where
  /// any does not (the ranks of one host in different pid namespaces, e.g. containers that
  /// share /dev/shm only, where a pid means another process or none), the watch stays off for
  /// this set and its waits end only at their deadlines. `set_id` names the set in errors.
  /// False when the exchange itself failed (the group is then unusable anyway).
  bool setup(Bootstrap& group, int set_id);
  /// The code of the Status a dead peer gives: ErrorCode::kInternal under the Gloo controller
  /// (hvd::InternalError: the survivors may shutdown() and init() again), kBackend under MPI
  /// (the default: mpirun ends such a job).
  void set_lost_code(ErrorCode code) { lost_code_ = code; }
  ErrorCode lost_code() const { return lost_code_; }
  /// The set named in errors (setup()'s `set_id`; 0 before).
  int set_id() const { return set_id_; }
  bool enabled() const { return !pids_.empty(); }
  /// OK while every member's process runs (or the watch is off); otherwise an error naming
  /// the set, what was waited for (`what`) and the first dead rank. Every member, not only the
  /// one waited for: a collective needs them all, and a live peer this rank waits for may be
  /// waiting for the dead one itself (or have left the collective on seeing it dead).
  Status check(const char* what) const;

 private:
  void close_all();

  std::vector<pid_t> pids_;  // by rank; empty: off
  // By rank: /proc/<pid>/stat of each peer, opened once at setup and read again with pread()
  // at every check (-1 for this rank, or where /proc is missing: kill() alone then). Held open
  // so that a check opens no file (a descriptor count that moves during a long wait would read
  // as a leak), and bound to the process itself: once it is reaped a read fails with ESRCH even
  // if its pid is reused.
  std::vector<int> stat_fds_;
  int rank_ = 0;
  int set_id_ = 0;
  ErrorCode lost_code_ = ErrorCode::kBackend;
};

}  // namespace hvd
