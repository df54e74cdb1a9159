// Copyright horovod_cpp authors. The negotiation protocol (coordination/controller.h) with 2, 3
// and 4 ranks as threads of this process.
//
// Expected results are derived from the script (who submitted what, when), never from the
// controller's own output: e.g. a tensor's response cycle is the last cycle in which a rank
// submitted it, and error texts are spelled out from the documented format.
#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "coordination/controller.h"
#include "controller_support.h"
#include "in_process_control_plane.h"

using namespace hvd;
using namespace hvd::testing;


TEST_CASE("a tensor is a response only once every rank submitted it", "[controller]") {
  const int n = GENERATE(2, 3, 4);
  // submit_at[name][rank]: the cycle in which that rank submits it.
  std::map<std::string, std::vector<int>> submit_at;
  for (int r = 0; r < n; ++r) {
    submit_at["early"].push_back(r);          // rank r at cycle r
    submit_at["late"].push_back(n - 1 - r);   // reverse order
    submit_at["together"].push_back(1);       // everyone in cycle 1
    submit_at["one_slow"].push_back(r == 1 ? 2 * n : 0);
  }
  Script s;
  s.ranks = n;
  s.cycles = 2 * n + 3;
  s.input = [&](int rank, int cycle) {
    CycleInput in;
    for (const auto& [name, at] : submit_at) {
      if (at[static_cast<size_t>(rank)] == cycle) in.requests.push_back(req(name));
    }
    return in;
  };
  RunResult res = run_script(s);
  require_ok(res);
  require_identical(res);
  for (const auto& [name, at] : submit_at) {
    const int last = *std::max_element(at.begin(), at.end());
    INFO("tensor " << name);
    CHECK(res.cycle_of(0, name) == last);
    // Exactly once, and successful.
    int count = 0;
    for (const auto& r : res.all_responses(0)) {
      if (r.name == name) {
        ++count;
        CHECK(r.ok());
        CHECK(r.shape == Shape({4, 5}));
      }
    }
    CHECK(count == 1);
  }
  for (int r = 0; r < n; ++r) CHECK_FALSE(res.controllers[static_cast<size_t>(r)]->has_pending());
}

TEST_CASE("steady state is served from the cache without full cycles", "[controller]") {
  const int n = GENERATE(2, 3, 4);
  const std::vector<std::string> names = {"l0.w", "l0.b", "l1.w", "l1.b", "l2.w"};
  const int steps = 5, step_len = 3;
  Script s;
  s.ranks = n;
  s.cycles = steps * step_len;
  // Each step every rank submits all tensors, in a rank-dependent order; from step 2 on the
  // last rank is one cycle late, so the others' cache hits wait for it.
  s.input = [&](int rank, int cycle) {
    CycleInput in;
    const int step = cycle / step_len, off = cycle % step_len;
    const int when = (step >= 2 && rank == n - 1) ? 1 : 0;
    if (off == when) {
      for (size_t i = 0; i < names.size(); ++i) {
        in.requests.push_back(req(names[(i + static_cast<size_t>(rank)) % names.size()],
                                  {static_cast<int64_t>(i + 1)}));
      }
      // Shapes must agree across ranks: key them by name instead of by position.
      for (auto& q : in.requests) {
        const auto pos = std::find(names.begin(), names.end(), q.name) - names.begin();
        q.shape = {static_cast<int64_t>(pos + 1)};
      }
    }
    return in;
  };
  RunResult res = run_script(s);
  require_ok(res);
  require_identical(res);
  const auto& recs = res.records[0];
  const std::multiset<std::string> all(names.begin(), names.end());
  for (int step = 0; step < steps; ++step) {
    const int expect_cycle = step * step_len + (step >= 2 ? 1 : 0);
    INFO("step " << step);
    for (int c = step * step_len; c < (step + 1) * step_len; ++c) {
      if (c == expect_cycle) {
        CHECK(names_in(recs[static_cast<size_t>(c)]) == all);
      } else {
        CHECK(recs[static_cast<size_t>(c)].result.responses.empty());
      }
    }
  }
  // Step 0 negotiated in full; from step 1 on no full cycle ran.
  const uint64_t after_first = recs[step_len - 1].full_cycles;
  CHECK(after_first >= 1);
  CHECK(recs.back().full_cycles == after_first);
  for (int c = step_len; c < s.cycles; ++c) CHECK_FALSE(recs[static_cast<size_t>(c)].result.full_cycle);
  for (int r = 0; r < n; ++r) {
    CHECK(res.controllers[static_cast<size_t>(r)]->cache().size() == names.size());
    // The wire traffic agrees: one allreduce per cycle, gathers only in full cycles.
    CHECK(res.planes[static_cast<size_t>(r)]->allreduces() == static_cast<uint64_t>(s.cycles));
    CHECK(res.planes[static_cast<size_t>(r)]->gathers() == after_first);
  }
  // Cached responses carry the negotiated parameters.
  for (const auto& r : recs[static_cast<size_t>(2 * step_len + 1)].result.responses) {
    const auto pos = std::find(names.begin(), names.end(), r.name) - names.begin();
    CHECK(r.shape == Shape({static_cast<int64_t>(pos + 1)}));
    CHECK(r.ok());
  }
}

TEST_CASE("cache hits hand back each rank's own tag and the bit; a stale hint is checked",
          "[controller]") {
  const int n = GENERATE(2, 3, 4);
  const std::vector<std::string> names = {"h.a", "h.b", "h.c", "h.d", "h.e"};
  const int steps = 5;
  Script s;
  s.ranks = n;
  s.cycles = steps;
  // Every rank submits every name each cycle, in a rank-dependent order, tagged with its own
  // numbers. The hints are wrong on purpose from step 1 on: another name's position, a
  // position past the cache, none; a hint taken on trust would hit the wrong entry.
  const auto tag_of = [](int rank, size_t i) { return static_cast<uint32_t>(1000 * rank + 7 * i); };
  s.input = [&](int rank, int cycle) {
    CycleInput in;
    for (size_t k = 0; k < names.size(); ++k) {
      const size_t i = (k + static_cast<size_t>(rank)) % names.size();
      Request q = req(names[i], {static_cast<int64_t>(i + 1)});
      q.local_tag = tag_of(rank, i);
      if (cycle > 0) {
        const uint32_t wrong[] = {static_cast<uint32_t>((i + 1) % names.size()), 4000u,
                                  kNoLocalTag};
        q.cache_hint = wrong[(i + static_cast<size_t>(cycle)) % 3];
      }
      in.requests.push_back(std::move(q));
    }
    return in;
  };
  RunResult res = run_script(s);
  require_ok(res);
  require_identical(res);
  for (int r = 0; r < n; ++r) {
    const auto& recs = res.records[static_cast<size_t>(r)];
    const Controller& c = *res.controllers[static_cast<size_t>(r)];
    CHECK(recs[0].result.full_cycle);
    CHECK(recs[0].result.hits.empty());  // negotiated in full: found by name
    for (int cycle = 1; cycle < steps; ++cycle) {
      INFO("rank " << r << " cycle " << cycle);
      const CycleResult& out = recs[static_cast<size_t>(cycle)].result;
      CHECK_FALSE(out.full_cycle);  // a misused hint invalidates the entry: a full cycle
      REQUIRE(out.responses.size() == names.size());
      REQUIRE(out.hits.size() == out.responses.size());
      for (size_t k = 0; k < out.responses.size(); ++k) {
        const std::string& name = out.responses[k].name;
        const size_t i =
            static_cast<size_t>(std::find(names.begin(), names.end(), name) - names.begin());
        REQUIRE(i < names.size());
        CHECK(out.responses[k].shape == Shape({static_cast<int64_t>(i + 1)}));
        CHECK(out.hits[k].tag == tag_of(r, i));
        const std::optional<uint32_t> bit = c.cache().find(name);
        REQUIRE(bit);
        CHECK(out.hits[k].bit == *bit);
      }
    }
  }
}

namespace {

// One parameter changed on one rank, and how the error must describe both values.
struct Change {
  const char* what;
  Request base;
  Request changed;
  std::string op_prefix;  // "allreduce" or "mismatched collective for"
  std::string base_text, changed_text;
};

std::vector<Change> changes() {
  std::vector<Change> v;
  {
    Change c{"shape", req("fc.weight", {4, 5}), req("fc.weight", {4, 6}), "allreduce",
             "float32[4,5]", "float32[4,6]"};
    v.push_back(c);
  }
  {
    Change c{"dtype", req("fc.weight", {4, 5}), req("fc.weight", {4, 5}, DataType::kFloat64),
             "allreduce", "float32[4,5]", "float64[4,5]"};
    v.push_back(c);
  }
  {
    Change c{"reduce op", req("fc.weight"), req("fc.weight"), "allreduce", "op sum", "op max"};
    c.changed.reduce_op = ReduceOp::kMax;
    v.push_back(c);
  }
  {
    Change c{"prescale", req("fc.weight"), req("fc.weight"), "allreduce",
             "prescale_factor 1 and postscale_factor 1",
             "prescale_factor 0.5 and postscale_factor 1"};
    c.changed.prescale = 0.5;
    v.push_back(c);
  }
  {
    Change c{"postscale", req("fc.weight"), req("fc.weight"), "allreduce",
             "prescale_factor 1 and postscale_factor 1",
             "prescale_factor 1 and postscale_factor 0.25"};
    c.changed.postscale = 0.25;
    v.push_back(c);
  }
  {
    Change c{"root", req("emb", {3}, DataType::kFloat32, OpType::kBroadcast),
             req("emb", {3}, DataType::kFloat32, OpType::kBroadcast), "broadcast", "root 0",
             "root 1"};
    c.changed.root = 1;
    v.push_back(c);
  }
  {
    Change c{"collective", req("fc.weight", {4, 5}),
             req("fc.weight", {4, 5}, DataType::kFloat32, OpType::kAllgather),
             "mismatched collective for", "allreduce", "allgather"};
    v.push_back(c);
  }
  return v;
}

}  // namespace

TEST_CASE("a parameter changed on one rank is an error naming tensor, ranks and values",
          "[controller]") {
  const int n = GENERATE(2, 3, 4);
  const auto all_changes = changes();
  const size_t which = GENERATE(range<size_t>(0, 7));
  REQUIRE(all_changes.size() == 7);
  const Change& ch = all_changes[which];
  // When the odd rank submits relative to the others: same cycle, one cycle before (so the
  // invalidation comes first), one cycle after (so the others' cache hits are pending).
  const int skew = GENERATE(0, -1, 1);
  // Also whether the tensor was cached first (step 0 clean) or it is the first submission.
  const bool cached_first = GENERATE(true, false);
  const int odd = n - 1;
  const int change_cycle = 3;  // the others submit then; the odd rank at change_cycle + skew
  Script s;
  s.ranks = n;
  s.cycles = 9;
  s.input = [&](int rank, int cycle) {
    CycleInput in;
    if (cached_first && cycle == 0) in.requests.push_back(ch.base);
    const int at = rank == odd ? change_cycle + skew : change_cycle;
    if (cycle == at) in.requests.push_back(rank == odd ? ch.changed : ch.base);
    // Afterwards everyone agrees again: negotiated and cached normally.
    if (cycle == 6 || cycle == 8) in.requests.push_back(ch.base);
    return in;
  };
  RunResult res = run_script(s);
  require_ok(res);
  require_identical(res);
  INFO("change " << ch.what << ", " << n << " ranks, skew " << skew << ", cached first "
                 << cached_first);
  const std::string name = ch.base.name;
  const std::string expected = ch.op_prefix + " '" + name + "': " +
                               ranks_text(range_except(n, odd)) + " sent " + ch.base_text +
                               ", " + ranks_text({odd}) + " sent " + ch.changed_text;
  const int error_cycle = std::max(change_cycle, change_cycle + skew);
  for (int r = 0; r < n; ++r) {
    const auto& recs = res.records[static_cast<size_t>(r)];
    if (cached_first) {
      REQUIRE(find_response(recs[0], name) != nullptr);
      CHECK(find_response(recs[0], name)->ok());
    }
    for (int c = 1; c < s.cycles; ++c) {
      const Response* resp = find_response(recs[static_cast<size_t>(c)], name);
      if (c == error_cycle) {
        REQUIRE(resp != nullptr);
        CHECK(resp->error == expected);
      } else if (c == 6 || c == 8) {
        REQUIRE(resp != nullptr);
        CHECK(resp->ok());
      } else {
        CHECK(resp == nullptr);
      }
    }
  }
  // The failed parameters were not cached; the agreed ones were, and step 8 used the cache.
  CHECK(res.controllers[0]->cache().size() == 1);
  CHECK_FALSE(res.records[0][8].result.full_cycle);
}

TEST_CASE("allgather: first dims per rank, re-negotiated when they change", "[controller]") {
  const int n = GENERATE(2, 3, 4);
  Script s;
  s.ranks = n;
  s.cycles = 8;
  // Cycles 0 and 2: rank r gathers r+1 rows; from cycle 4 on rank 1 sends 7 rows instead.
  // Cycle 6 is a hit on the replaced entry, after cycle 2's hit on the old one: the copy of
  // the old entry that the controller keeps for reuse must not come back.
  auto rows = [&](int rank, int cycle) -> int64_t { return (cycle >= 4 && rank == 1) ? 7 : rank + 1; };
  s.input = [&](int rank, int cycle) {
    CycleInput in;
    if (cycle % 2 == 0) {
      in.requests.push_back(req("g", {rows(rank, cycle), 3}, DataType::kInt32, OpType::kAllgather));
    }
    return in;
  };
  RunResult res = run_script(s);
  require_ok(res);
  require_identical(res);
  for (int c : {0, 2, 4, 6}) {
    INFO("cycle " << c);
    const Response* r = find_response(res.records[0][static_cast<size_t>(c)], "g");
    REQUIRE(r != nullptr);
    CHECK(r->ok());
    std::vector<int64_t> expect;
    for (int k = 0; k < n; ++k) expect.push_back(rows(k, c));
    CHECK(r->first_dims == expect);
    CHECK(r->shape == Shape({rows(0, c), 3}));
    // The bytes each rank contributes follow its own first dim.
    for (int k = 0; k < n; ++k) CHECK(r->nbytes_for_rank(k) == rows(k, c) * 3 * 4);
  }
  CHECK_FALSE(res.records[0][2].result.full_cycle);  // same dims: from the cache
  CHECK(res.records[0][4].result.full_cycle);        // changed dims: negotiated again
  CHECK_FALSE(res.records[0][6].result.full_cycle);  // the new dims: from the cache
}

TEST_CASE("allgather with different trailing dims is an error", "[controller]") {
  const int n = GENERATE(2, 3, 4);
  Script s;
  s.ranks = n;
  s.cycles = 1;
  s.input = [&](int rank, int) {
    CycleInput in;
    in.requests.push_back(
        req("g", {2, rank == 1 ? 4 : 3}, DataType::kFloat32, OpType::kAllgather));
    return in;
  };
  RunResult res = run_script(s);
  require_ok(res);
  require_identical(res);
  const Response* r = find_response(res.records[0][0], "g");
  REQUIRE(r != nullptr);
  CHECK(r->error == "allgather 'g': " + ranks_text(range_except(n, 1)) +
                        " sent 2-d with trailing dims [3], rank 1 sent 2-d with trailing dims [4]");
}

TEST_CASE("grouped tensors come out together once ready on every rank", "[controller]") {
  const int n = GENERATE(2, 3, 4);
  const std::vector<std::string> members = {"g.a", "g.b", "g.c"};
  const int step_len = n + 1;
  Script s;
  s.ranks = n;
  s.cycles = 3 * step_len;
  // Step k: rank r submits the group at cycle k*step_len + r (so the last rank completes it),
  // plus an ungrouped tensor at the step's first cycle.
  s.input = [&](int rank, int cycle) {
    CycleInput in;
    const int step = cycle / step_len, off = cycle % step_len;
    if (off == 0) in.requests.push_back(req("solo", {2}));
    if (off == (step == 1 ? n - 1 - rank : rank)) {
      for (const auto& m : members) in.requests.push_back(grouped(req(m, {3}), "G", 3));
    }
    return in;
  };
  RunResult res = run_script(s);
  require_ok(res);
  require_identical(res);
  for (int step = 0; step < 3; ++step) {
    INFO("step " << step);
    const int expect = step * step_len + n - 1;
    for (const auto& m : members) CHECK(res.cycle_of(0, m) >= 0);
    for (int c = step * step_len; c < (step + 1) * step_len; ++c) {
      const auto& rec = res.records[0][static_cast<size_t>(c)];
      // All members in the ready cycle, contiguous and in submission order; none elsewhere.
      std::vector<std::string> got;
      for (const auto& r : rec.result.responses) {
        if (r.group == "G") {
          CHECK(r.ok());
          got.push_back(r.name);
        }
      }
      if (c == expect) {
        CHECK(got == members);
      } else {
        CHECK(got.empty());
      }
    }
  }
  CHECK(res.controllers[0]->cache().size() == 4);
  // Steps 1 and 2 were served from the cache.
  CHECK(res.records[0].back().full_cycles == res.records[0][static_cast<size_t>(step_len - 1)].full_cycles);
}

TEST_CASE("a failing member fails its whole group", "[controller]") {
  const int n = GENERATE(2, 3);
  Script s;
  s.ranks = n;
  s.cycles = 1;
  s.input = [&](int rank, int) {
    CycleInput in;
    in.requests.push_back(grouped(req("g.a", {3}), "G", 2));
    in.requests.push_back(grouped(req("g.b", {rank == 1 ? 5 : 4}), "G", 2));
    return in;
  };
  RunResult res = run_script(s);
  require_ok(res);
  require_identical(res);
  const auto& rec = res.records[0][0];
  REQUIRE(rec.result.responses.size() == 2);
  const Response* b = find_response(rec, "g.b");
  const Response* a = find_response(rec, "g.a");
  REQUIRE(a);
  REQUIRE(b);
  const std::string b_err = "allreduce 'g.b': " + ranks_text(range_except(n, 1)) +
                            " sent float32[4], rank 1 sent float32[5]";
  CHECK(b->error == b_err);
  CHECK(a->error == "allreduce 'g.a': another tensor of its group failed: " + b_err);
  CHECK(res.controllers[0]->cache().size() == 0);
}

TEST_CASE("cache eviction with pending requests still completes everything", "[controller]") {
  const int n = GENERATE(2, 3, 4);
  const uint32_t capacity = GENERATE(1u, 2u, 3u);
  const int num = 6, steps = 6, step_len = 6;
  Script s;
  s.ranks = n;
  s.cycles = steps * step_len;
  s.options.cache_capacity = capacity;
  // submit_cycle(step, rank, i): spread over the first three cycles of the step, differently
  // per rank and per step, so evictions hit bits that are pending on some ranks only.
  auto submit_off = [](int step, int rank, int i) { return (i * 7 + rank * 3 + step) % 3; };
  s.input = [&](int rank, int cycle) {
    CycleInput in;
    const int step = cycle / step_len, off = cycle % step_len;
    for (int i = 0; i < num; ++i) {
      if (submit_off(step, rank, i) == off) {
        in.requests.push_back(req("t" + std::to_string(i), {static_cast<int64_t>(i + 1)}));
      }
    }
    return in;
  };
  RunResult res = run_script(s);
  require_ok(res);
  require_identical(res);
  for (int step = 0; step < steps; ++step) {
    for (int i = 0; i < num; ++i) {
      const std::string name = "t" + std::to_string(i);
      int last = 0;
      for (int r = 0; r < n; ++r) last = std::max(last, submit_off(step, r, i));
      // Once per step, not before the last rank submitted it, at most two cycles after
      // (a re-send after an eviction costs one cycle).
      int count = 0, at = -1;
      for (int c = step * step_len; c < (step + 1) * step_len; ++c) {
        for (const auto& r : res.records[0][static_cast<size_t>(c)].result.responses) {
          if (r.name == name) {
            ++count;
            at = c - step * step_len;
            CHECK(r.ok());
            CHECK(r.shape == Shape({i + 1}));
          }
        }
      }
      INFO("step " << step << " tensor " << name << " last submitted at " << last);
      CHECK(count == 1);
      CHECK(at >= last);
      CHECK(at <= last + 2);
    }
  }
  for (int r = 0; r < n; ++r) {
    CHECK(res.controllers[static_cast<size_t>(r)]->cache().size() <= capacity);
    CHECK(res.controllers[static_cast<size_t>(r)]->cache().num_bits() <= capacity);
    CHECK_FALSE(res.controllers[static_cast<size_t>(r)]->has_pending());
  }
}

TEST_CASE("max_and_words bounds every cycle's AND vector", "[controller]") {
  // A flags word, then ready, valid and none words for the cache's bits (at most its
  // capacity: the eviction test above checks num_bits() <= capacity). Shared-memory planes
  // size their buffers by it (transport/shm/shm_control_plane.h).
  CHECK(max_and_words(0) == 1);
  CHECK(max_and_words(1) == 4);
  CHECK(max_and_words(64) == 4);
  CHECK(max_and_words(65) == 7);
  CHECK(max_and_words(4096) == 193);
}

TEST_CASE("cache disabled: every submission is negotiated in full", "[controller]") {
  const int n = GENERATE(2, 3);
  Script s;
  s.ranks = n;
  s.cycles = 4;
  s.options.cache_capacity = 0;
  s.input = [&](int, int cycle) {
    CycleInput in;
    if (cycle % 2 == 0) in.requests.push_back(req("x"));
    return in;
  };
  RunResult res = run_script(s);
  require_ok(res);
  require_identical(res);
  for (int c : {0, 2}) {
    CHECK(res.records[0][static_cast<size_t>(c)].result.full_cycle);
    CHECK(find_response(res.records[0][static_cast<size_t>(c)], "x") != nullptr);
  }
  CHECK(res.controllers[0]->cache().size() == 0);
}

TEST_CASE("shutdown requested by some ranks reaches every rank with who asked", "[controller]") {
  const int n = GENERATE(2, 3, 4);
  const bool two = GENERATE(false, true);
  if (two && n < 3) return;
  Script s;
  s.ranks = n;
  s.cycles = 6;
  s.input = [&](int rank, int cycle) {
    CycleInput in;
    if (cycle == 0) in.requests.push_back(req("x"));  // cached, so cycle 2 is otherwise idle
    if (cycle == 1) in.requests.push_back(req("x"));
    in.shutdown = cycle == 3 && (rank == 1 || (two && rank == 2));
    return in;
  };
  RunResult res = run_script(s);
  require_ok(res);
  require_identical(res);
  for (int r = 0; r < n; ++r) {
    const auto& recs = res.records[static_cast<size_t>(r)];
    REQUIRE(recs.size() == 4);  // stopped at the shutdown cycle
    for (int c = 0; c < 3; ++c) CHECK_FALSE(recs[static_cast<size_t>(c)].result.shutdown);
    CHECK(recs[3].result.shutdown);
    const std::string& why = recs[3].result.shutdown_reason;
    CHECK_THAT(why, Catch::Contains(two ? "ranks 1,2" : "rank 1 "));
    CHECK_THAT(why, Catch::Contains("shutdown"));
    CHECK_FALSE(recs[3].result.fatal);  // an orderly shutdown does not end the job
  }
}
