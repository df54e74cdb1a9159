// Copyright horovod_cpp authors.
#include "transport/shm/peer_watch.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace hvd {

bool process_alive(pid_t pid) {
  // EPERM: the process exists but belongs to someone else; only ESRCH means gone.
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  char path[32];
  snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno != ENOENT;  // no /proc here: kill() has answered
  char buf[512];
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return true;
  buf[n] = '\0';
  // "pid (comm) S ...": comm may hold spaces and parentheses, the state follows the last ')'.
  const char* close_paren = strrchr(buf, ')');
  if (!close_paren || close_paren[1] != ' ') return true;
  const char state = close_paren[2];
  return state != 'Z' && state != 'X';
}

bool PeerWatch::setup(Bootstrap& group, int set_id) {
  set_id_ = set_id;
  rank_ = group.rank();
  pids_.clear();
  std::vector<int64_t> all(static_cast<size_t>(group.size()), 0);
  const int64_t mine = static_cast<int64_t>(getpid());
  const bool exchanged = group.allgather(&mine, sizeof(mine), all.data()).ok();
  bool visible = exchanged;
  for (int64_t pid : all) visible = visible && pid > 0 && process_alive(static_cast<pid_t>(pid));
  if (all_agree(group, visible)) pids_.assign(all.begin(), all.end());
  return exchanged;
}

Status PeerWatch::check(const char* what) const {
  int r = 0;
  const int n = static_cast<int>(pids_.size());
  while (r < n && (r == rank_ || process_alive(pids_[static_cast<size_t>(r)]))) ++r;
  if (r == n) return Status::OK();
  return Status(lost_code_, "process set " + std::to_string(set_id_) + ": rank " +
                                std::to_string(r) + " (pid " +
                                std::to_string(pids_[static_cast<size_t>(r)]) +
                                ") died while this rank waited for it in " + what);
}

}  // namespace hvd
