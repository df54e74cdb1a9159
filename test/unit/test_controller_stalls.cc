// Copyright horovod_cpp authors. The negotiation protocol's stall reports, cache eviction of
// pending bits and agreed votes (coordination/controller.h), with 2, 3 and 4 ranks as threads
// of this process. Expected results are derived from the script, never from the controller's
// own output.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "controller_support.h"
#include "coordination/controller.h"
#include "in_process_control_plane.h"

using namespace hvd;
using namespace hvd::testing;

namespace {

// A stall scenario: `stuck` is submitted by every rank but `missing`; cycle k is at k seconds.
struct StallRun {
  RunResult res;
  int submit_cycle;
};

StallRun run_stall(int n, int missing, bool cached, ControllerOptions opts, int cycles) {
  Script s;
  s.ranks = n;
  s.cycles = cycles;
  s.options = opts;
  s.clock_at = [](int cycle) { return 1000.0 + cycle; };
  const int submit = cached ? 2 : 0;
  s.input = [=](int rank, int cycle) {
    CycleInput in;
    if (cached && cycle == 0) in.requests.push_back(req("stuck"));
    if (cycle == submit && rank != missing) in.requests.push_back(req("stuck"));
    // Unrelated traffic keeps flowing (cached after its first step).
    if (cycle % 3 == 0) in.requests.push_back(req("busy" + std::to_string(cycle % 2), {2}));
    return in;
  };
  return {run_script(s), submit};
}

}  // namespace

TEST_CASE("stall report names the tensor and the missing rank", "[controller]") {
  const int n = GENERATE(2, 3, 4);
  const bool cached = GENERATE(false, true);
  const int missing = GENERATE(0, 1);
  ControllerOptions opts;
  opts.stall_check_seconds = 10;
  StallRun run = run_stall(n, missing, cached, opts, 16);
  require_ok(run.res);
  require_identical(run.res);
  INFO(n << " ranks, cached " << cached << ", missing rank " << missing);
  const auto& recs = run.res.records[0];
  const std::vector<int> have = range_except(n, missing);
  const std::string expect_tail = "submitted by " + ranks_text(have) + ", missing on " +
                                  ranks_text({missing});
  // Nothing before the tensor waited stall_check_seconds; a report within two cycles after.
  for (int c = 0; c < run.submit_cycle + 10; ++c) CHECK(recs[static_cast<size_t>(c)].stall_report.empty());
  const std::string& report = recs[static_cast<size_t>(run.submit_cycle + 12)].stall_report;
  CHECK_THAT(report, Catch::Contains("allreduce 'stuck'"));
  CHECK_THAT(report, Catch::Contains(expect_tail));
  CHECK_THAT(report, Catch::Contains("waited 1"));  // 10 or 11 s
  CHECK_THAT(report, !Catch::Contains("busy"));
  // Only rank 0 reports; nobody shuts down.
  for (int r = 1; r < n; ++r) CHECK(run.res.records[static_cast<size_t>(r)].back().stall_report.empty());
  for (const auto& rec : recs) CHECK_FALSE(rec.result.shutdown);
  // The stalled tensor never ran.
  CHECK(run.res.cycle_of(0, "stuck") == (cached ? 0 : -1));
}

TEST_CASE("in a process set the stall report names global ranks", "[controller]") {
  const int n = GENERATE(2, 3);
  ControllerOptions opts;
  opts.stall_check_seconds = 10;
  for (int r = 0; r < n; ++r) opts.rank_names.push_back(10 + 2 * r);  // set of global 10, 12, ..
  StallRun run = run_stall(n, 1, false, opts, 16);
  require_ok(run.res);
  std::vector<int> have;
  for (int r = 0; r < n; ++r) {
    if (r != 1) have.push_back(10 + 2 * r);
  }
  const std::string& report =
      run.res.records[0][static_cast<size_t>(run.submit_cycle + 12)].stall_report;
  CHECK_THAT(report, Catch::Contains("submitted by " + ranks_text(have) + ", missing on rank 12"));
}

TEST_CASE("stall check can be disabled", "[controller]") {
  ControllerOptions opts;
  opts.stall_check_seconds = 2;
  opts.stall_check_disabled = true;
  StallRun run = run_stall(3, 2, false, opts, 10);
  require_ok(run.res);
  for (const auto& rec : run.res.records[0]) CHECK(rec.stall_report.empty());
}

TEST_CASE("stall shutdown stops every rank with the tensor and missing rank", "[controller]") {
  const int n = GENERATE(2, 3, 4);
  const bool cached = GENERATE(false, true);
  const bool check_disabled = GENERATE(false, true);
  const int missing = n - 1;
  ControllerOptions opts;
  opts.stall_check_seconds = 5;
  opts.stall_check_disabled = check_disabled;
  opts.stall_shutdown_seconds = 12;
  StallRun run = run_stall(n, missing, cached, opts, 30);
  require_ok(run.res);
  require_identical(run.res);
  INFO(n << " ranks, cached " << cached << ", check disabled " << check_disabled);
  const auto& recs = run.res.records[0];
  REQUIRE(recs.size() < 30);  // stopped on shutdown
  const int stop = static_cast<int>(recs.size()) - 1;
  CHECK(stop >= run.submit_cycle + 12);
  CHECK(stop <= run.submit_cycle + 14);
  for (int r = 0; r < n; ++r) {
    const CycleResult& last = run.res.records[static_cast<size_t>(r)].back().result;
    CHECK(last.shutdown);
    CHECK_THAT(last.shutdown_reason, Catch::Contains("'stuck'"));
    CHECK_THAT(last.shutdown_reason, Catch::Contains("missing on " + ranks_text({missing})));
    CHECK_THAT(last.shutdown_reason, Catch::Contains("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"));
    CHECK(last.fatal);  // a stuck rank: the job must end (common/fatal.h)
  }
}

TEST_CASE("evicting a bit that is pending on some ranks keeps the caches identical",
          "[controller]") {
  const int n = GENERATE(2, 3, 4);
  // Capacity 2: A and B are cached, A least recently used. Rank 0 then holds A as a pending
  // cache hit while C is negotiated, whose insertion evicts A (and reuses A's position).
  Script s;
  s.ranks = n;
  s.cycles = 8;
  s.options.cache_capacity = 2;
  s.input = [&](int rank, int cycle) {
    CycleInput in;
    if (cycle == 0) in.requests.push_back(req("A", {1}));
    if (cycle == 1) in.requests.push_back(req("B", {2}));
    if (cycle == 3 && rank == 0) in.requests.push_back(req("A", {1}));
    if (cycle == 3) in.requests.push_back(req("C", {3}));
    if (cycle == 5 && rank != 0) in.requests.push_back(req("A", {1}));
    if (cycle == 7) {  // all three again, at once
      in.requests.push_back(req("A", {1}));
      in.requests.push_back(req("B", {2}));
      in.requests.push_back(req("C", {3}));
    }
    return in;
  };
  RunResult res = run_script(s);
  require_ok(res);
  require_identical(res);
  const auto& recs = res.records[0];
  CHECK(names_in(recs[3]) == std::multiset<std::string>{"C"});
  CHECK(recs[4].result.responses.empty());
  CHECK(names_in(recs[5]) == std::multiset<std::string>{"A"});
  CHECK(names_in(recs[7]) == std::multiset<std::string>{"A", "B", "C"});
  for (int r = 0; r < n; ++r) {
    const ResponseCache& cache = res.controllers[static_cast<size_t>(r)]->cache();
    CHECK(cache.size() == 2);
    CHECK_FALSE(res.controllers[static_cast<size_t>(r)]->has_pending());
  }
}

TEST_CASE("evicting one member of a pending group re-sends the whole group", "[controller]") {
  const int n = GENERATE(2, 3, 4);
  // Capacity 3: G = {a, b} and X cached, a least recently used. Rank 0 holds G as pending
  // hits when Y's insertion evicts a; the group must still come out whole, once.
  Script s;
  s.ranks = n;
  s.cycles = 9;
  s.options.cache_capacity = 3;
  auto group = [] {
    return std::vector<Request>{grouped(req("a", {1}), "G", 2), grouped(req("b", {2}), "G", 2)};
  };
  s.input = [&](int rank, int cycle) {
    CycleInput in;
    if (cycle == 0 || (cycle == 3 && rank == 0) || (cycle == 5 && rank != 0) || cycle == 8) {
      in.requests = group();
    }
    if (cycle == 1) in.requests.push_back(req("X", {3}));
    if (cycle == 3) in.requests.push_back(req("Y", {4}));
    return in;
  };
  RunResult res = run_script(s);
  require_ok(res);
  require_identical(res);
  const auto& recs = res.records[0];
  CHECK(names_in(recs[0]) == std::multiset<std::string>{"a", "b"});
  CHECK(names_in(recs[3]) == std::multiset<std::string>{"Y"});
  CHECK(recs[4].result.responses.empty());
  CHECK(names_in(recs[5]) == std::multiset<std::string>{"a", "b"});
  CHECK(names_in(recs[8]) == std::multiset<std::string>{"a", "b"});
  for (int r = 0; r < n; ++r) CHECK_FALSE(res.controllers[static_cast<size_t>(r)]->has_pending());
}

TEST_CASE("votes: every rank gets the OR of the ranks' votes in the same cycle",
          "[controller][votes]") {
  const int n = GENERATE(2, 3, 4);
  // Rank r votes a pattern of its own each cycle, over every vote bit, a quarter of them set
  // (so that the OR of four ranks still leaves bits clear); requests come and go meanwhile
  // (cached and full cycles both carry the votes).
  const auto vote_of = [](int rank, int cycle) {
    const uint64_t h = static_cast<uint64_t>(cycle + 1) * 0x9e3779b97f4a7c15ull ^
                       static_cast<uint64_t>(rank + 1) * 0xbf58476d1ce4e5b9ull;
    return ((h & (h * 0x94d049bb133111ebull)) >> 3) & ((uint64_t{1} << Controller::kVoteBits) - 1);
  };
  Script s;
  s.ranks = n;
  s.cycles = 12;
  s.input = [&](int rank, int cycle) {
    CycleInput in;
    in.votes = vote_of(rank, cycle);
    if (cycle % 3 == 0) in.requests.push_back(req("t"));
    return in;
  };
  RunResult res = run_script(s);
  require_ok(res);
  for (int c = 0; c < s.cycles; ++c) {
    uint64_t expected = 0;
    for (int r = 0; r < n; ++r) expected |= vote_of(r, c);
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r << " cycle " << c);
      CHECK(res.records[static_cast<size_t>(r)][static_cast<size_t>(c)].result.votes == expected);
    }
  }
  // Votes change nothing else: "t" ran every time it was submitted.
  CHECK(res.all_responses(0).size() == 4);
}
