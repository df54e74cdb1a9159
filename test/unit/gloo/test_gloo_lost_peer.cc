// Copyright horovod_cpp authors. A peer lost mid-collective: the survivors get an
// ErrorCode::kInternal Status within the op timeout, then connect a new group and go on.
#include <gloo/context.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cerrno>

#include "gloo_threads.h"
#include "transport/gloo/gloo_control_plane.h"

namespace hvd {
namespace testing {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kOpTimeout = std::chrono::milliseconds(1000);

// Ranks 0 and 1 allreduce while rank 2 `leaves` (closes its connections, or stays silent
// until the others are done); then 0 and 1 connect a new group under a new prefix.
// With `direct_max_bytes` of 1 MiB the 256 KiB allreduce is streamed over the direct links.
void lose_rank_two(const std::string& prefix, bool close_connections,
                   int64_t direct_max_bytes = 16 << 10) {
  ThreadedGlooJob job(3, kOpTimeout);
  for (int r = 0; r < 3; ++r) job.job(r)->direct_max_bytes = direct_max_bytes;
  std::atomic<int> survivors_done{0};
  job.run(prefix, [&](int r, GlooBootstrap& world) {
    std::unique_ptr<DataPlane> plane;
    if (!world.make_data_plane(&plane).ok()) return job.fail(r, "no data plane");
    std::vector<float> buf(1 << 16, 1.0f);
    if (r == 2) {  // takes part in one allreduce, then leaves
      if (!plane->allreduce(buf.data(), 16, DataType::kFloat32, ReduceOp::kSum).ok())
        job.fail(r, "first allreduce");
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (close_connections) world.context()->closeConnections();
      while (survivors_done.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    if (!plane->allreduce(buf.data(), 16, DataType::kFloat32, ReduceOp::kSum).ok())
      job.fail(r, "first allreduce");
    const auto start = Clock::now();
    Status s = plane->allreduce(buf.data(), static_cast<int64_t>(buf.size()), DataType::kFloat32,
                                ReduceOp::kSum);
    const auto waited = Clock::now() - start;
    survivors_done.fetch_add(1);
    if (s.ok()) return job.fail(r, "the allreduce without rank 2 succeeded");
    if (s.code() != ErrorCode::kInternal)
      job.fail(r, "code " + std::to_string(int(s.code())) + ": " + s.message());
    if (s.message().find("gloo allreduce over test world failed") == std::string::npos) {
      job.fail(r, "message does not name the call and group: " + s.message());
    }
    if (waited > kOpTimeout + std::chrono::seconds(3)) job.fail(r, "the failure took too long");
    // The survivors start again as a job of two (a new generation's prefix).
    std::unique_ptr<GlooBootstrap> next;
    s = GlooBootstrap::connect(job.job(r), prefix + "/g1", r, 2, "second generation", &next);
    if (!s.ok()) return job.fail(r, "reconnect: " + s.message());
    std::unique_ptr<DataPlane> again;
    next->make_data_plane(&again);
    int64_t v = r + 1;
    s = again->allreduce(&v, 1, DataType::kInt64, ReduceOp::kSum);
    if (!s.ok() || v != 3) job.fail(r, "allreduce of the new group: " + s.message());
  });
  CHECK(job.failures() == std::vector<std::string>{});
}

// The negotiation over direct links (synchronous pairs, read in the waiting thread): ranks 0
// and 1 allreduce_and while rank 2 closes its connections or stays silent. Rank 0 waits on
// rank 2 first (3 ranks: rank 2 folds into rank 0): a closed connection fails it at once, a
// silent peer after the op timeout; rank 1, waiting on rank 0, within the op timeout.
void lose_rank_two_direct(const std::string& prefix, bool close_connections) {
  ThreadedGlooJob job(3, kOpTimeout);
  std::atomic<int> survivors_done{0};
  job.run(prefix, [&](int r, GlooBootstrap&) {
    std::shared_ptr<gloo::Context> ctx;
    std::unique_ptr<DirectLinks> direct;
    Status s = connect_group(*job.job(r), prefix + "/control", r, 3, "test set", &ctx);
    if (s.ok())
      s = connect_direct_links(*job.job(r), prefix + "/control/direct", r, 3, "test set", &direct);
    if (!s.ok()) return job.fail(r, "connect: " + s.message());
    auto plane = std::make_unique<GlooControlPlane>(std::move(ctx), "test set", std::move(direct));
    std::vector<uint64_t> words(4, ~0ull);
    if (!plane->allreduce_and(&words).ok()) job.fail(r, "first allreduce_and");
    if (r == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (close_connections) plane.reset();  // its contexts close their pairs
      while (survivors_done.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    const auto start = Clock::now();
    s = plane->allreduce_and(&words);
    const auto waited = Clock::now() - start;
    survivors_done.fetch_add(1);
    if (s.ok()) return job.fail(r, "the allreduce_and without rank 2 succeeded");
    if (s.code() != ErrorCode::kInternal)
      job.fail(r, "code " + std::to_string(int(s.code())) + ": " + s.message());
    if (s.message().find("coordination bit vector exchange") == std::string::npos)
      job.fail(r, "message does not name the call: " + s.message());
    if (waited > kOpTimeout + std::chrono::seconds(3)) job.fail(r, "the failure took too long");
    if (r == 0 && close_connections && waited > kOpTimeout / 2)
      job.fail(r, "a closed connection was not seen at once");
    if (!close_connections && waited < kOpTimeout - std::chrono::milliseconds(100))
      job.fail(r, "failed before the op timeout: " + s.message());
  });
  CHECK(job.failures() == std::vector<std::string>{});
}

}  // namespace

// Gloo's pairs write with writev(): without the library's SIG_IGN, a write to a peer that has
// gone (a killed elastic worker) ends this process with SIGPIPE instead of failing the op.
TEST_CASE("gloo lost peer: a Gloo device makes a write to a closed peer EPIPE, not SIGPIPE",
          "[gloo]") {
  auto device = make_loopback_device();
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  ::close(fds[1]);
  char c = 'x';
  iovec v{&c, 1};
  errno = 0;
  const ssize_t n = ::writev(fds[0], &v, 1);
  const int err = errno;
  ::close(fds[0]);
  CHECK(n == -1);
  CHECK(err == EPIPE);
}

TEST_CASE("gloo lost peer: closed connections fail the others' allreduce as kInternal", "[gloo]") {
  lose_rank_two("lost_closed", true);
}

TEST_CASE("gloo lost peer: a silent peer fails the others' allreduce after the op timeout",
          "[gloo]") {
  lose_rank_two("lost_silent", false);
}

TEST_CASE("gloo lost peer: a streamed allreduce fails at once on a closed connection, "
          "after the op timeout on a silent peer",
          "[gloo]") {
  lose_rank_two("lost_stream_closed", true, 1 << 20);
  lose_rank_two("lost_stream_silent", false, 1 << 20);
}

TEST_CASE("gloo lost peer: direct links fail the negotiation at once on a closed connection",
          "[gloo]") {
  lose_rank_two_direct("lost_direct_closed", true);
}

TEST_CASE("gloo lost peer: direct links fail the negotiation after the op timeout", "[gloo]") {
  lose_rank_two_direct("lost_direct_silent", false);
}

}  // namespace testing
}  // namespace hvd
