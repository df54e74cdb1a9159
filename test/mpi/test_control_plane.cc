// Copyright horovod_cpp authors. The negotiation's bit-vector AND through shared memory
// (transport/shm/shm_control_plane.h) under mpirun: every word of every round against the AND
// each rank computes itself from every rank's seeded words, vectors longer than the segment's
// buffers (the MPI plane it wraps), a late rank, and the fallback when the ranks are not on
// one host.
#include <mpi.h>
#include <unistd.h>

#include <memory>

#include "transport/mpi/mpi_bootstrap.h"
#include "transport/mpi/mpi_control_plane.h"
#include "transport/shm/shm_control_plane.h"
#include "test_util.h"

namespace {

uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Rank r's word i in round t: about one bit in eight clear, so the AND over 2-4 ranks keeps
// about half of them set (a plane that returned its own words, all ones or all zeros fails).
uint64_t word(int r, int t, size_t i) {
  const uint64_t k = (static_cast<uint64_t>(r) << 48) ^ (static_cast<uint64_t>(t) << 20) ^ i;
  return ~(mix(k) & mix(k + 0x1000000000ull) & mix(k + 0x2000000000ull));
}

struct Planes {
  MPI_Comm comm = MPI_COMM_NULL;
  std::unique_ptr<hvd::ControlPlane> plane;
  Planes(int host, size_t max_words) {
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    int rank = 0, size = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    auto mpi = std::make_unique<hvd::MpiControlPlane>(comm, rank, size, /*yield_core=*/true);
    hvd::MpiBootstrap group(nullptr, comm, /*owns=*/false, 0, "the test's communicator");
    plane = hvd::make_shm_control_plane(group, 7, host, max_words, true, std::move(mpi));
  }
  ~Planes() {
    plane.reset();
    MPI_Comm_free(&comm);
  }
  bool over_mpi() const { return dynamic_cast<hvd::MpiControlPlane*>(plane.get()) != nullptr; }
};

// Runs `rounds` ANDs of lengths 1..max_len in turn; returns the wrong words on this rank.
int64_t run_rounds(hvd::ControlPlane* plane, int rounds, size_t max_len, int late_round) {
  const int me = plane->rank(), n = plane->size();
  int64_t bad = 0;
  std::vector<uint64_t> v;
  for (int t = 0; t < rounds; ++t) {
    const size_t len = 1 + static_cast<size_t>(t) % max_len;
    v.resize(len);
    for (size_t i = 0; i < len; ++i) v[i] = word(me, t, i);
    if (t == late_round && me == n - 1) usleep(30 * 1000);  // the others wait, then go on
    hvd::Status s = plane->allreduce_and(&v);
    if (!s.ok()) return bad + 1000000;
    for (size_t i = 0; i < len; ++i) {
      uint64_t want = ~0ull;
      for (int r = 0; r < n; ++r) want &= word(r, t, i);
      bad += v[i] != want;
    }
  }
  return bad;
}

}  // namespace

TEST_CASE("negotiation AND through shared memory: every word of every round", "[control][shm]") {
  Planes p(/*host=*/-1, /*max_words=*/5);
  CHECK_FALSE(p.over_mpi());  // every rank of this job is on this machine
  CHECK(p.plane->size() >= 2);
  // Lengths 1-8 in turn: 1-5 through shared memory, 6-8 over MPI, interleaved, so the
  // segment's rounds stay in step across the other plane's; one rank arrives 30 ms late.
  CHECK(run_rounds(p.plane.get(), 3000, 8, 1234) == 0);
  // The full negotiation's gather and broadcast pass through to MPI.
  std::string blob = p.plane->rank() == 0 ? std::string("rank 0 decides") : std::string();
  REQUIRE(p.plane->broadcast(&blob).ok());
  CHECK(blob == "rank 0 decides");
  std::vector<std::string> all;
  REQUIRE(p.plane->gather("from " + std::to_string(p.plane->rank()), &all).ok());
  if (p.plane->rank() == 0) {
    REQUIRE(static_cast<int>(all.size()) == p.plane->size());
    for (int r = 0; r < p.plane->size(); ++r)
      CHECK(all[static_cast<size_t>(r)] == "from " + std::to_string(r));
  }
  CHECK(run_rounds(p.plane.get(), 200, 5, -1) == 0);
}

TEST_CASE("negotiation AND: ranks on different hosts keep MPI", "[control][shm]") {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Planes p(/*host=*/rank, /*max_words=*/5);  // every rank a host of its own
  CHECK(p.over_mpi());
  CHECK(run_rounds(p.plane.get(), 300, 8, -1) == 0);
}
