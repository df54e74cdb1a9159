// Copyright horovod_cpp authors. The measured choice of ways for large collectives on one
// host (transport/shm/gather_paths.h): one copy or two through the segments, the segments or
// MPI.
#include <catch2/catch.hpp>
#include <set>
#include <vector>

#include "transport/shm/gather_paths.h"

namespace hvd {
namespace {

constexpr int64_t kMin = 256 * 1024;

// Feeds `calls` calls of `kind` and `bytes`, timing each way at `two` / `one` seconds per
// byte; returns which calls went by single copy.
std::vector<bool> feed(GatherPaths& p, GatherPaths::Kind kind, int64_t bytes, int calls, double two,
                       double one) {
  std::vector<bool> ways;
  for (int i = 0; i < calls; ++i) {
    const bool single = p.second_way(kind, bytes);
    ways.push_back(single);
    p.record(kind, bytes, single, static_cast<double>(bytes) * (single ? one : two));
  }
  return ways;
}

uint64_t bit(GatherPaths::Kind kind, int band) {
  return uint64_t{1} << GatherPaths::bit(kind, band);
}

}  // namespace

TEST_CASE("gather paths: bands from the smallest size, off below it or when disabled",
          "[gather_paths]") {
  GatherPaths p;
  CHECK_FALSE(p.enabled());
  CHECK(p.band(1 << 30) == -1);
  p.enable(kMin);
  CHECK(p.band(kMin - 1) == -1);
  CHECK(p.band(kMin) == 0);
  CHECK(p.band(4 * kMin - 1) == 0);
  CHECK(p.band(4 * kMin) == 1);
  CHECK(p.band(16 * kMin) == 2);
  CHECK(p.band(64 * kMin) == 3);
  CHECK(p.band(int64_t{1} << 40) == 3);
  CHECK_FALSE(p.second_way(GatherPaths::kAllgather, kMin - 1));  // not counted, not chosen
}

TEST_CASE("gather paths: the calls that try the other way are the same whatever the timings",
          "[gather_paths]") {
  // Two ranks with opposite timings, the same agreed mask: the same way for every call.
  GatherPaths a, b;
  a.enable(kMin);
  b.enable(kMin);
  const std::vector<bool> wa = feed(a, GatherPaths::kAlltoall, kMin, 100, 1e-9, 9e-9);
  const std::vector<bool> wb = feed(b, GatherPaths::kAlltoall, kMin, 100, 9e-9, 1e-9);
  CHECK(wa == wb);
  std::set<int> tried;
  for (int i = 0; i < 100; ++i) {
    if (wa[static_cast<size_t>(i)]) tried.insert(i);
  }
  CHECK(tried == std::set<int>{1, 2, 3, 33, 65, 97});
  // With single copies agreed, the same calls try two copies instead.
  GatherPaths c;
  c.enable(kMin);
  c.set_agreed(bit(GatherPaths::kAlltoall, 0));
  const std::vector<bool> wc = feed(c, GatherPaths::kAlltoall, kMin, 100, 1e-9, 1e-9);
  for (int i = 0; i < 100; ++i) CHECK(wc[static_cast<size_t>(i)] == (tried.count(i) == 0));
}

TEST_CASE("gather paths: votes follow the slowest rank's costs, with a margin to switch",
          "[gather_paths]") {
  const auto kind = GatherPaths::kBroadcast;
  GatherPaths p;
  p.enable(kMin);
  // Calls 0 (two copies) and 1 (single) are cold and not counted, 2-3 single, 4-5 two: no
  // vote until each way has kMinSamples counted calls.
  feed(p, kind, kMin, 5, 4e-9, 1e-9);
  CHECK(p.costs().c[kind][0][0] == Approx(4e-9));
  CHECK(p.costs().c[kind][0][1] == Approx(1e-9));
  CHECK(p.votes(p.costs()) == 0);
  feed(p, kind, kMin, 1, 4e-9, 1e-9);
  CHECK(p.votes(p.costs()) == bit(kind, 0));  // 4x faster: single copies

  // Not enough of a gain to leave two copies: 1.4x (kSwitchGain is 1.5).
  GatherPaths q;
  q.enable(kMin);
  feed(q, kind, 4 * kMin, 8, 1.4e-9, 1e-9);
  CHECK(q.votes(q.costs()) == 0);

  // Once single copies are in use, two copies come back as soon as they are faster.
  q.set_agreed(bit(kind, 1));
  CHECK(q.votes(q.costs()) == bit(kind, 1));  // single still faster: stays
  GatherPaths::Costs slower_peer = q.costs();
  slower_peer.c[kind][1][1] = 2e-9;  // a peer whose single copies are slower than two
  GatherPaths::Costs slowest = q.costs();
  GatherPaths::fold_slowest(slower_peer, &slowest);
  CHECK(slowest.c[kind][1][1] == Approx(2e-9));
  CHECK(q.votes(slowest) == 0);  // the slowest rank decides: back to two copies
}

TEST_CASE("gather paths: the slowest of the ranks' costs, unknown when any rank lacks it",
          "[gather_paths]") {
  GatherPaths::Costs a, b;
  a.c[0][0][0] = 1.0;
  b.c[0][0][0] = 3.0;
  a.c[1][2][1] = 2.0;  // b has not measured it
  b.c[2][3][1] = 5.0;  // a has not measured it
  GatherPaths::fold_slowest(b, &a);
  CHECK(a.c[0][0][0] == 3.0);
  CHECK(a.c[1][2][1] == 0.0);
  CHECK(a.c[2][3][1] == 0.0);
}

TEST_CASE("gather paths: the fastest of the last calls, following a change within a window",
          "[gather_paths]") {
  const auto kind = GatherPaths::kAllgather;
  GatherPaths p;
  p.enable(kMin);
  feed(p, kind, kMin, 8, 1e-9, 2e-9);
  CHECK(p.votes(p.costs()) == 0);
  // A call that waited for a late rank does not count against its way.
  CHECK_FALSE(p.second_way(kind, kMin));
  p.record(kind, kMin, false, kMin * 9e-9);
  CHECK(p.costs().c[kind][0][0] == Approx(1e-9));
  // Two copies turn 5x slower (the benchmark VM's bad stretches): once a window of calls has
  // seen it, single copies win.
  feed(p, kind, kMin, GatherPaths::kWindow, 5e-9, 2e-9);
  CHECK(p.costs().c[kind][0][0] == Approx(5e-9));
  CHECK(p.votes(p.costs()) == bit(kind, 0));
}

TEST_CASE("gather paths: test votes differ by seed and by cycle", "[gather_paths]") {
  GatherPaths a, b;
  a.enable(kMin, 0x9e3779b97f4a7c15ull);
  b.enable(kMin, 2 * 0x9e3779b97f4a7c15ull);
  std::set<uint64_t> seen;
  int differ = 0;
  for (int i = 0; i < 50; ++i) {
    const uint64_t va = a.votes(a.costs()), vb = b.votes(b.costs());
    CHECK((va & ~GatherPaths::kVoteMask) == 0);
    seen.insert(va);
    differ += va != vb;
  }
  CHECK(seen.size() > 40);
  CHECK(differ > 40);
}

TEST_CASE("gather paths: MPI for the reductions, with its own margin, only where enabled",
          "[gather_paths]") {
  const auto kind = GatherPaths::kAllreduce;
  GatherPaths p;
  p.enable(kMin);  // the gather kinds only: reductions never leave the fold
  CHECK(p.band(kind, kMin) == -1);
  CHECK(p.band(GatherPaths::kBroadcast, kMin) == 0);
  for (int i = 0; i < 10; ++i) CHECK_FALSE(p.second_way(kind, kMin));
  p.enable(kMin, 0, GatherPaths::kMpiKinds);
  CHECK(p.band(kind, kMin) == 0);
  // MPI 1.2x faster: past kMpiSwitchGain (1.1), short of kSwitchGain.
  feed(p, kind, kMin, 8, 1.2e-9, 1e-9);
  CHECK(p.votes(p.costs()) == bit(kind, 0));
  // 1.05x: not enough to leave the fold; enough to stay on MPI once there.
  GatherPaths q;
  q.enable(kMin, 0, GatherPaths::kMpiKinds);
  feed(q, GatherPaths::kReducescatter, kMin, 8, 1.05e-9, 1e-9);
  CHECK(q.votes(q.costs()) == 0);
  q.set_agreed(bit(GatherPaths::kReducescatter, 0));
  CHECK(q.votes(q.costs()) == bit(GatherPaths::kReducescatter, 0));
  // Test votes only for the enabled kinds (3 to 7: bits 12 to 31), every one of them drawn.
  GatherPaths t;
  t.enable(kMin, 12345, GatherPaths::kMpiKinds);
  uint64_t drawn = 0;
  for (int i = 0; i < 20; ++i) {
    const uint64_t v = t.votes(t.costs());
    CHECK((v & ~(uint64_t{0xfffff} << 12)) == 0);
    drawn |= v;
  }
  CHECK(drawn == uint64_t{0xfffff} << 12);
}

TEST_CASE("gather paths: MPI for allgathers and alltoalls, apart from their copy ways",
          "[gather_paths]") {
  GatherPaths p;
  p.enable(kMin, 0, GatherPaths::kGatherKinds | GatherPaths::kMpiKinds);
  for (auto kind : {GatherPaths::kAllgatherPlane, GatherPaths::kAlltoallPlane}) {
    CHECK(p.band(kind, 16 * kMin) == 2);
    // MPI 1.2x faster in band 2: past kMpiSwitchGain (1.1), short of kSwitchGain.
    feed(p, kind, 16 * kMin, 8, 1.2e-9, 1e-9);
  }
  const uint64_t planes =
      bit(GatherPaths::kAllgatherPlane, 2) | bit(GatherPaths::kAlltoallPlane, 2);
  CHECK(p.votes(p.costs()) == planes);
  // The copy ways of the same calls choose on their own counts and costs: two copies 1.2x
  // slower than one is no reason to leave them.
  feed(p, GatherPaths::kAllgather, 16 * kMin, 8, 1.2e-9, 1e-9);
  CHECK(p.votes(p.costs()) == planes);
  feed(p, GatherPaths::kAlltoall, 16 * kMin, 8, 4e-9, 1e-9);
  CHECK(p.votes(p.costs()) == (planes | bit(GatherPaths::kAlltoall, 2)));
  // The agreed planes (the highest vote bits) take MPI on every call but the exploring ones.
  GatherPaths q;
  q.enable(kMin, 0, GatherPaths::kMpiKinds);
  q.set_agreed(bit(GatherPaths::kAlltoallPlane, 3));
  CHECK(q.agreed() == uint64_t{1} << 31);
  const std::vector<bool> ways = feed(q, GatherPaths::kAlltoallPlane, 64 * kMin, 40, 1e-9, 1e-9);
  for (int i = 0; i < 40; ++i) {
    const bool explore = i == 2 || i == 3 || i % GatherPaths::kExplorePeriod == 1;
    CHECK(ways[static_cast<size_t>(i)] == !explore);
  }
}

TEST_CASE("gather paths: a forced way on every call, whatever the votes", "[gather_paths]") {
  for (int way : {0, 1}) {
    GatherPaths p;
    p.enable(kMin, 0, GatherPaths::kGatherKinds | GatherPaths::kMpiKinds);
    p.force(way);
    p.set_agreed(way ? 0u : ~uint64_t{0});  // the opposite of the forced way everywhere
    for (int i = 0; i < 70; ++i) {
      CHECK(p.second_way(GatherPaths::kReducescatter, 4 * kMin) == (way == 1));
      CHECK(p.second_way(GatherPaths::kAllgather, kMin) == (way == 1));
      CHECK(p.second_way(GatherPaths::kAlltoallPlane, 64 * kMin) == (way == 1));
    }
  }
}

}  // namespace hvd
