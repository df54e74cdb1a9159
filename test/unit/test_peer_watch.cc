// Copyright horovod_cpp authors. PeerWatch (transport/shm/peer_watch.h) against a real peer
// process: a forked child that joins the pid exchange over a socket pair, is then killed, and
// must be reported dead both while it is a zombie (not reaped yet, as under a launcher that
// has not waited for it) and once it is gone.
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "transport/shm/peer_watch.h"

using namespace hvd;

namespace {

// Rank 0 of a two-member group whose rank 1 is the process at the other end of `fd`: each
// allgather sends this rank's bytes and reads as many of the peer's.
class SocketPairBootstrap : public Bootstrap {
 public:
  explicit SocketPairBootstrap(int fd) : fd_(fd) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  const std::string& name() const override { return name_; }
  Status allgather(const void* mine, size_t bytes, void* all) override {
    unsigned char* out = static_cast<unsigned char*>(all);
    std::memcpy(out, mine, bytes);
    if (write(fd_, mine, bytes) != static_cast<ssize_t>(bytes)) return Status::Backend("write");
    size_t got = 0;
    while (got < bytes) {
      const ssize_t n = read(fd_, out + bytes + got, bytes - got);
      if (n <= 0) return Status::Backend("the peer closed the socket");
      got += static_cast<size_t>(n);
    }
    return Status::OK();
  }
  Status broadcast(void*, size_t, int) override { return unused(); }
  Status barrier() override { return unused(); }
  Status split(int, int, std::unique_ptr<Bootstrap>*) override { return unused(); }
  Status split_host(std::unique_ptr<Bootstrap>*) override { return unused(); }
  Status make_data_plane(std::unique_ptr<DataPlane>*) override { return unused(); }

 private:
  static Status unused() { return Status::Backend("not used by PeerWatch"); }
  int fd_;
  std::string name_ = "socket pair";
};

// Forks a peer that answers PeerWatch::setup()'s two exchanges (its pid, then "all visible")
// with plain writes (nothing that may take a lock after fork()), then waits to be killed.
pid_t fork_peer(int fd) {
  const pid_t child = fork();
  if (child == 0) {
    const int64_t pid = static_cast<int64_t>(getpid());
    int64_t theirs = 0;
    const unsigned char yes = 1;
    unsigned char agreed = 0;
    if (write(fd, &pid, sizeof(pid)) != sizeof(pid) || read(fd, &theirs, sizeof(theirs)) <= 0 ||
        write(fd, &yes, 1) != 1 || read(fd, &agreed, 1) <= 0) {
      _exit(1);
    }
    for (;;) pause();
  }
  return child;
}

}  // namespace

TEST_CASE("process_alive: this process runs; a killed child is dead as a zombie and after") {
  CHECK(process_alive(getpid()));
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    for (;;) pause();
  }
  CHECK(process_alive(child));
  REQUIRE(kill(child, SIGKILL) == 0);
  // Not reaped: a zombie (kill(pid, 0) still succeeds). SIGKILL takes effect asynchronously.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (process_alive(child) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK_FALSE(process_alive(child));
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK_FALSE(process_alive(child));
}

TEST_CASE("PeerWatch reports a killed peer, naming the set, the wait and the rank") {
  int fds[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  const pid_t child = fork_peer(fds[1]);
  REQUIRE(child > 0);
  close(fds[1]);
  SocketPairBootstrap group(fds[0]);
  PeerWatch watch;
  CHECK_FALSE(watch.enabled());
  REQUIRE(watch.setup(group, 7));
  REQUIRE(watch.enabled());
  watch.set_lost_code(ErrorCode::kInternal);
  CHECK(watch.check("a test").ok());

  REQUIRE(kill(child, SIGKILL) == 0);
  Status s;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((s = watch.check("a test")).ok() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE_FALSE(s.ok());  // while a zombie: this test has not reaped it yet
  CHECK(s.code() == ErrorCode::kInternal);
  CHECK(s.message() == "process set 7: rank 1 (pid " + std::to_string(child) +
                           ") died while this rank waited for it in a test");
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(watch.check("a test").code() == ErrorCode::kInternal);
  close(fds[0]);
}

TEST_CASE("PeerWatch stays off where a member cannot see another's process") {
  int fds[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  // The peer reports a pid that names no process here (as from another pid namespace): a
  // reaped child's pid.
  const pid_t gone = fork();
  REQUIRE(gone >= 0);
  if (gone == 0) _exit(0);
  REQUIRE(waitpid(gone, nullptr, 0) == gone);
  const int64_t pid = gone;
  const unsigned char yes = 1;
  REQUIRE(write(fds[1], &pid, sizeof(pid)) == sizeof(pid));
  REQUIRE(write(fds[1], &yes, 1) == 1);
  SocketPairBootstrap group(fds[0]);
  PeerWatch watch;
  REQUIRE(watch.setup(group, 3));
  CHECK_FALSE(watch.enabled());
  CHECK(watch.check("a test").ok());  // off: the deadline decides
  close(fds[0]);
  close(fds[1]);
}
