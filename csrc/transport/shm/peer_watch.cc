// Copyright horovod_cpp authors.
#include "transport/shm/peer_watch.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

namespace hvd {

namespace {

// From the text of /proc/<pid>/stat: false for a zombie or a dead task (state Z or X).
bool stat_says_alive(char* buf, ssize_t n) {
  if (n <= 0) return true;
  buf[n] = '\0';
  // "pid (comm) S ...": comm may hold spaces and parentheses, the state follows the last ')'.
  const char* close_paren = strrchr(buf, ')');
  if (!close_paren || close_paren[1] != ' ') return true;
  const char state = close_paren[2];
  return state != 'Z' && state != 'X';
}

int open_stat(pid_t pid) {
  char path[32];
  snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  return open(path, O_RDONLY | O_CLOEXEC);
}

// Through a descriptor opened by open_stat() (or kill() alone without one).
bool held_process_alive(pid_t pid, int stat_fd) {
  if (stat_fd < 0) return !(kill(pid, 0) != 0 && errno == ESRCH);
  char buf[512];
  const ssize_t n = pread(stat_fd, buf, sizeof(buf) - 1, 0);
  if (n < 0) return errno != ESRCH;  // ESRCH: the process is gone (reaped)
  return stat_says_alive(buf, n);
}

}  // namespace

bool process_alive(pid_t pid) {
  // EPERM: the process exists but belongs to someone else; only ESRCH means gone.
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  const int fd = open_stat(pid);
  if (fd < 0) return errno != ENOENT;  // no /proc here: kill() has answered
  const bool alive = held_process_alive(pid, fd);
  close(fd);
  return alive;
}

PeerWatch::~PeerWatch() {
  close_all();
}

PeerWatch::PeerWatch(PeerWatch&& other) noexcept
    : pids_(std::move(other.pids_)),
      stat_fds_(std::move(other.stat_fds_)),
      rank_(other.rank_),
      set_id_(other.set_id_),
      lost_code_(other.lost_code_) {
  other.pids_.clear();
  other.stat_fds_.clear();
}

PeerWatch& PeerWatch::operator=(PeerWatch&& other) noexcept {
  if (this != &other) {
    close_all();
    pids_ = std::move(other.pids_);
    stat_fds_ = std::move(other.stat_fds_);
    rank_ = other.rank_;
    set_id_ = other.set_id_;
    lost_code_ = other.lost_code_;
    other.pids_.clear();
    other.stat_fds_.clear();
  }
  return *this;
}

void PeerWatch::close_all() {
  for (int fd : stat_fds_) {
    if (fd >= 0) close(fd);
  }
  stat_fds_.clear();
  pids_.clear();
}

bool PeerWatch::setup(Bootstrap& group, int set_id) {
  close_all();
  set_id_ = set_id;
  rank_ = group.rank();
  std::vector<int64_t> all(static_cast<size_t>(group.size()), 0);
  const int64_t mine = static_cast<int64_t>(getpid());
  const bool exchanged = group.allgather(&mine, sizeof(mine), all.data()).ok();
  bool visible = exchanged;
  for (int64_t pid : all) visible = visible && pid > 0 && process_alive(static_cast<pid_t>(pid));
  if (all_agree(group, visible)) {
    pids_.assign(all.begin(), all.end());
    stat_fds_.assign(pids_.size(), -1);
    for (size_t r = 0; r < pids_.size(); ++r) {
      if (static_cast<int>(r) != rank_) stat_fds_[r] = open_stat(pids_[r]);
    }
  }
  return exchanged;
}

Status PeerWatch::check(const char* what) const {
  int r = 0;
  const int n = static_cast<int>(pids_.size());
  while (r < n && (r == rank_ || held_process_alive(pids_[static_cast<size_t>(r)],
                                                    stat_fds_[static_cast<size_t>(r)]))) {
    ++r;
  }
  if (r == n) return Status::OK();
  return Status(lost_code_, "process set " + std::to_string(set_id_) + ": rank " +
                                std::to_string(r) + " (pid " +
                                std::to_string(pids_[static_cast<size_t>(r)]) +
                                ") died while this rank waited for it in " + what);
}

}  // namespace hvd
