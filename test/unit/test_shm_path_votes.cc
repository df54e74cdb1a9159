// Copyright horovod_cpp authors. The measured ways' costs as the ranks publish them in their
// segments' headers and read each other's for their votes (ShmAllreduce::record_path,
// path_votes): three ranks as three ShmAllreduce objects of one process, over real segments.
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "transport/shm/shm_allreduce.h"

namespace hvd {
namespace {

constexpr int kRanks = 3;
constexpr int64_t kMin = 256 * 1024;

// kRanks ranks' objects over segments of their own (a tag unique to this process and call).
std::vector<std::unique_ptr<ShmAllreduce>> make_ranks() {
  static std::atomic<int> calls{0};
  const std::string tag = "pathvotes." + std::to_string(getpid()) + "." + std::to_string(calls++);
  std::vector<std::unique_ptr<ShmAllreduce>> ranks(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    REQUIRE(ShmAllreduce::create(tag, r, kRanks, 4096, &ranks[static_cast<size_t>(r)]).ok());
  }
  for (auto& s : ranks) REQUIRE(s->attach().ok());
  for (auto& s : ranks) {
    s->unlink();
    s->paths().enable(kMin, 0, GatherPaths::kMpiKinds);
  }
  return ranks;
}

// `calls` calls of `kind` and `bytes` on every rank (the same calls, as every rank runs),
// timed at `fold[r]` / `mpi[r]` seconds per byte on rank r.
void feed(std::vector<std::unique_ptr<ShmAllreduce>>& ranks, GatherPaths::Kind kind, int64_t bytes,
          int calls, const double (&fold)[kRanks], const double (&mpi)[kRanks]) {
  for (int i = 0; i < calls; ++i) {
    for (int r = 0; r < kRanks; ++r) {
      ShmAllreduce& s = *ranks[static_cast<size_t>(r)];
      const bool second = s.paths().second_way(kind, bytes);
      s.record_path(kind, bytes, second, static_cast<double>(bytes) * (second ? mpi[r] : fold[r]));
    }
  }
}

uint64_t bit(GatherPaths::Kind kind, int band) {
  return uint64_t{1} << GatherPaths::bit(kind, band);
}

TEST_CASE("shm path votes: every rank reads the peers' costs, class by class", "[shm_path_votes]") {
  auto ranks = make_ranks();
  const auto a = GatherPaths::kAllreduce;
  const auto rs = GatherPaths::kReducescatter;
  // 40 calls: calls 1-3 and 32 go to MPI, the rest to the fold; each way counted enough.
  // Ranks 0 and 1 alone see no gain in MPI; rank 2's fold is 3x slower, so the slowest rank's
  // costs favour MPI: every rank votes for it, which it can only do from rank 2's header.
  feed(ranks, a, kMin, 40, {1e-9, 1e-9, 3e-9}, {1e-9, 1e-9, 1e-9});
  for (auto& s : ranks) CHECK(s->path_votes() == bit(a, 0));

  // Another class changes (reducescatter, band 1: MPI faster on every rank): the allreduce's
  // vote stands on the peers' costs read before, now not read again.
  feed(ranks, rs, 4 * kMin, 40, {2e-9, 2e-9, 2e-9}, {1e-9, 1e-9, 1e-9});
  for (auto& s : ranks) CHECK(s->path_votes() == (bit(a, 0) | bit(rs, 1)));

  // Rank 2's fold gets as fast as the others' (a window of calls later): its header's new
  // cost reaches every rank, and the allreduce's vote goes.
  feed(ranks, a, kMin, GatherPaths::kWindow + 1, {1e-9, 1e-9, 1e-9}, {1e-9, 1e-9, 1e-9});
  for (auto& s : ranks) CHECK(s->path_votes() == bit(rs, 1));

  // Without a timed call since, the count stands.
  for (auto& s : ranks) CHECK(s->path_votes() == bit(rs, 1));
}

TEST_CASE("shm path votes: a peer without a class's costs keeps every rank on the first way",
          "[shm_path_votes]") {
  auto ranks = make_ranks();
  const auto b = GatherPaths::kBroadcastPlane;
  // Rank 1 never times MPI (every call on it failed, say: costs 0, unknown).
  for (int i = 0; i < 40; ++i) {
    for (int r = 0; r < kRanks; ++r) {
      ShmAllreduce& s = *ranks[static_cast<size_t>(r)];
      const bool second = s.paths().second_way(b, kMin);
      if (r == 1 && second) continue;
      s.record_path(b, kMin, second, static_cast<double>(kMin) * (second ? 1e-9 : 4e-9));
    }
  }
  for (auto& s : ranks) CHECK(s->path_votes() == 0);
}

}  // namespace
}  // namespace hvd
