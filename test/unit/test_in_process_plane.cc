// Copyright horovod_cpp authors. The test double itself: the in-process control plane must
// compute the collectives right and turn protocol divergence and hangs into errors.
#include <atomic>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "in_process_control_plane.h"

using namespace hvd;
using namespace hvd::testing;

namespace {

// Runs `body(rank, plane)` on n threads; returns each rank's status.
std::vector<Status> on_ranks(InProcessHub& hub,
                             const std::function<Status(int, InProcessControlPlane&)>& body) {
  std::vector<Status> st(static_cast<size_t>(hub.size()));
  std::vector<std::thread> th;
  for (int r = 0; r < hub.size(); ++r) {
    th.emplace_back([&, r] {
      InProcessControlPlane plane(&hub, r);
      st[static_cast<size_t>(r)] = body(r, plane);
    });
  }
  for (auto& t : th) t.join();
  return st;
}

uint64_t word_of(int rank, int step, int i) {
  // Deterministic pseudo-random words, different per rank, step and index.
  uint64_t x = (static_cast<uint64_t>(rank) + 1) * 0x9E3779B97F4A7C15ull ^
               (static_cast<uint64_t>(step) << 20) ^ static_cast<uint64_t>(i) * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 29);
}

}  // namespace

TEST_CASE("in-process plane computes and, gather and broadcast", "[in_process_plane]") {
  const int n = GENERATE(1, 2, 3, 4);
  InProcessHub hub(n);
  const int steps = 200;
  std::atomic<int> wrong{0};
  auto st = on_ranks(hub, [&](int rank, InProcessControlPlane& p) -> Status {
    if (p.rank() != rank || p.size() != n) ++wrong;
    for (int step = 0; step < steps; ++step) {
      const int len = step % 5;
      std::vector<uint64_t> w(static_cast<size_t>(len));
      for (int i = 0; i < len; ++i) w[static_cast<size_t>(i)] = word_of(rank, step, i);
      HVD_RETURN_IF_ERROR(p.allreduce_and(&w));
      for (int i = 0; i < len; ++i) {
        uint64_t expect = ~0ull;
        for (int r = 0; r < n; ++r) expect &= word_of(r, step, i);
        if (w[static_cast<size_t>(i)] != expect) ++wrong;
      }
      std::vector<std::string> all;
      HVD_RETURN_IF_ERROR(p.gather(std::string(static_cast<size_t>(rank + step % 3), 'a' + rank), &all));
      if (rank == 0) {
        if (all.size() != static_cast<size_t>(n)) ++wrong;
        for (int r = 0; r < n && r < static_cast<int>(all.size()); ++r) {
          if (all[static_cast<size_t>(r)] != std::string(static_cast<size_t>(r + step % 3), 'a' + r)) ++wrong;
        }
      }
      std::string blob = rank == 0 ? "root" + std::to_string(step) : "junk";
      HVD_RETURN_IF_ERROR(p.broadcast(&blob));
      if (blob != "root" + std::to_string(step)) ++wrong;
    }
    return Status::OK();
  });
  for (const auto& s : st) CHECK(s.ok());
  CHECK(wrong == 0);
}

TEST_CASE("in-process plane fails every rank when collectives diverge", "[in_process_plane]") {
  InProcessHub hub(3);
  auto st = on_ranks(hub, [&](int rank, InProcessControlPlane& p) -> Status {
    std::vector<uint64_t> w(1, 1);
    HVD_RETURN_IF_ERROR(p.allreduce_and(&w));
    if (rank == 2) {
      std::vector<std::string> all;
      return p.gather("x", &all);
    }
    std::vector<uint64_t> w2(rank == 1 ? 2 : 1, 1);
    return p.allreduce_and(&w2);
  });
  for (const auto& s : st) {
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(s.message(), Catch::Contains("different collectives"));
  }
  CHECK(hub.aborted());
}

TEST_CASE("in-process plane fails when allreduce lengths differ", "[in_process_plane]") {
  InProcessHub hub(2);
  auto st = on_ranks(hub, [&](int rank, InProcessControlPlane& p) -> Status {
    std::vector<uint64_t> w(static_cast<size_t>(rank + 1), 1);
    return p.allreduce_and(&w);
  });
  for (const auto& s : st) {
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(s.message(), Catch::Contains("lengths differ"));
  }
}

TEST_CASE("in-process plane times out instead of hanging", "[in_process_plane]") {
  InProcessHub hub(3, 0.2);
  const auto t0 = std::chrono::steady_clock::now();
  auto st = on_ranks(hub, [&](int rank, InProcessControlPlane& p) -> Status {
    if (rank == 1) return Status::OK();  // never joins
    std::string b = "x";
    return p.broadcast(&b);
  });
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(st[1].ok());
  CHECK_FALSE(st[0].ok());
  CHECK_FALSE(st[2].ok());
  CHECK_THAT(st[0].message(), Catch::Contains("timed out"));
  CHECK(secs < 5.0);
}

TEST_CASE("harness reports a rank's failure instead of hanging", "[in_process_plane]") {
  // Rank 1 throws from its script: the others, blocked in the exchange, are released.
  Script s;
  s.ranks = 3;
  s.cycles = 3;
  s.input = [](int rank, int cycle) -> CycleInput {
    if (rank == 1 && cycle == 1) throw std::runtime_error("scripted failure");
    return {};
  };
  RunResult res = run_script(s);
  REQUIRE_FALSE(res.errors.empty());
  bool named = false;
  for (const auto& e : res.errors) named = named || e.find("scripted failure") != std::string::npos;
  CHECK(named);
}
