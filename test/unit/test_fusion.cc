// Copyright horovod_cpp authors. The fusion planner: which responses share a fused buffer.
#include <map>
#include <random>
#include <set>
#include <tuple>

#include <catch2/catch.hpp>

#include "fusion/fusion_planner.h"

using namespace hvd;

namespace {

// An allreduce of `bytes` bytes (float32 unless told).
Response ar(const std::string& name, int64_t bytes, DataType dt = DataType::kFloat32) {
  Response r;
  r.op = OpType::kAllreduce;
  r.name = name;
  r.dtype = dt;
  r.shape = {bytes / static_cast<int64_t>(dtype_size(dt))};
  return r;
}

std::vector<std::vector<size_t>> members_of(const std::vector<FusionBatch>& plan) {
  std::vector<std::vector<size_t>> m;
  for (const auto& b : plan) m.push_back(b.members);
  return m;
}

using Key = std::tuple<int, int, int, int, double, double>;
Key key(const Response& r) {
  return Key(static_cast<int>(r.dtype), static_cast<int>(r.device.kind), r.device.index,
             static_cast<int>(r.reduce_op), r.prescale, r.postscale);
}

// Invariants of every plan, checked against the responses themselves.
void check_plan(const std::vector<Response>& rs, const std::vector<FusionBatch>& plan,
                int64_t threshold) {
  std::vector<int> seen(rs.size(), 0);
  for (const auto& b : plan) {
    REQUIRE(!b.members.empty());
    REQUIRE(b.offsets.size() == b.members.size());
    int64_t off = 0;
    for (size_t k = 0; k < b.members.size(); ++k) {
      REQUIRE(b.members[k] < rs.size());
      ++seen[b.members[k]];
      if (k) CHECK(b.members[k] > b.members[k - 1]);  // response order within a batch
      const Response& r = rs[b.members[k]];
      const int64_t bytes = r.ok() && r.op == OpType::kAllreduce
                                ? num_elements(r.shape) * static_cast<int64_t>(dtype_size(r.dtype))
                                : 0;
      CHECK(b.offsets[k] == off);  // contiguous
      off += bytes;
    }
    CHECK(b.bytes == off);
    if (b.fused()) {
      CHECK(b.bytes <= threshold);
      for (size_t m : b.members) {
        CHECK(rs[m].ok());
        CHECK(rs[m].op == OpType::kAllreduce);
        CHECK(key(rs[m]) == key(rs[b.members[0]]));
      }
    }
  }
  for (size_t i = 0; i < rs.size(); ++i) CHECK(seen[i] == 1);
}

}  // namespace

TEST_CASE("same-key allreduces fuse in order up to the threshold", "[fusion]") {
  std::vector<Response> rs;
  for (int i = 0; i < 5; ++i) rs.push_back(ar("t" + std::to_string(i), 100));
  auto plan = plan_fusion(rs, 250);
  check_plan(rs, plan, 250);
  CHECK(members_of(plan) == std::vector<std::vector<size_t>>{{0, 1}, {2, 3}, {4}});
  CHECK(plan[0].offsets == std::vector<int64_t>{0, 100});
  CHECK(plan[0].bytes == 200);
  CHECK(plan[2].bytes == 100);
  // Exactly at the threshold still fits.
  plan = plan_fusion(rs, 300);
  CHECK(members_of(plan) == std::vector<std::vector<size_t>>{{0, 1, 2}, {3, 4}});
  CHECK(plan[0].offsets == std::vector<int64_t>{0, 100, 200});
}

TEST_CASE("different dtype, device, op or scale do not fuse", "[fusion]") {
  std::vector<Response> rs;
  rs.push_back(ar("a", 16));
  rs.push_back(ar("b", 16, DataType::kFloat64));
  rs.push_back(ar("c", 16));
  rs.push_back(ar("d", 16));
  rs.back().reduce_op = ReduceOp::kMax;
  rs.push_back(ar("e", 16));
  rs.back().prescale = 0.5;
  rs.push_back(ar("f", 16));
  rs.back().postscale = 2;
  rs.push_back(ar("g", 16));
  rs.back().device = Device::cuda(0);
  rs.push_back(ar("h", 16));
  rs.back().device = Device::cuda(1);
  rs.push_back(ar("i", 16, DataType::kFloat64));
  rs.push_back(ar("j", 16));
  auto plan = plan_fusion(rs, 1 << 20);
  check_plan(rs, plan, 1 << 20);
  CHECK(members_of(plan) == std::vector<std::vector<size_t>>{
                                {0, 2, 9}, {1, 8}, {3}, {4}, {5}, {6}, {7}});
}

TEST_CASE("large tensors, errors, other collectives and threshold 0 run alone", "[fusion]") {
  std::vector<Response> rs;
  rs.push_back(ar("small0", 40));
  rs.push_back(ar("big", 1000));  // == threshold
  rs.push_back(ar("small1", 40));
  rs.push_back(ar("bad", 40));
  rs.back().error = "allreduce 'bad': mismatch";
  rs.push_back(ar("small2", 40));
  Response g = ar("gath", 40);
  g.op = OpType::kAllgather;
  g.shape = {10};
  g.first_dims = {10, 10};
  rs.push_back(g);
  Response bc = ar("bc", 40);
  bc.op = OpType::kBroadcast;
  rs.push_back(bc);
  rs.push_back(ar("small3", 40));
  auto plan = plan_fusion(rs, 1000);
  check_plan(rs, plan, 1000);
  CHECK(members_of(plan) ==
        std::vector<std::vector<size_t>>{{0, 2, 4, 7}, {1}, {3}, {5}, {6}});
  CHECK(plan[1].bytes == 1000);
  for (int64_t t : {0, -1}) {
    plan = plan_fusion(rs, t);
    REQUIRE(plan.size() == rs.size());
    for (size_t i = 0; i < rs.size(); ++i) {
      CHECK(plan[i].members == std::vector<size_t>{i});
      CHECK_FALSE(plan[i].fused());
    }
  }
}

TEST_CASE("a group that fits is not split across batches", "[fusion]") {
  // The header promises: groups are not split unless a group exceeds the threshold.
  std::vector<Response> rs;
  rs.push_back(ar("x", 200));
  for (const char* n : {"g.a", "g.b"}) {
    rs.push_back(ar(n, 80));
    rs.back().group = "G";
    rs.back().group_size = 2;
  }
  rs.push_back(ar("y", 20));
  // Another group whose members are not adjacent, with a same-key tensor in between.
  for (const char* n : {"h.a", "z", "h.b"}) {
    rs.push_back(ar(n, 100));
    if (n[0] == 'h') {
      rs.back().group = "H";
      rs.back().group_size = 2;
    }
  }
  auto plan = plan_fusion(rs, 300);
  check_plan(rs, plan, 300);
  bool together = false;
  for (const auto& b : plan) {
    const bool a = std::count(b.members.begin(), b.members.end(), 1) > 0;
    const bool bb = std::count(b.members.begin(), b.members.end(), 2) > 0;
    CHECK(a == bb);
    together = together || (a && bb);
  }
  CHECK(together);
  std::vector<size_t> batch_of(rs.size());
  for (size_t b = 0; b < plan.size(); ++b) {
    for (size_t m : plan[b].members) batch_of[m] = b;
  }
  CHECK(batch_of[4] == batch_of[6]);
}

TEST_CASE("random response lists give valid plans", "[fusion]") {
  std::mt19937 rng(7);
  for (int iter = 0; iter < 500; ++iter) {
    std::vector<Response> rs;
    const int n = 1 + static_cast<int>(rng() % 30);
    for (int i = 0; i < n; ++i) {
      Response r = ar("t" + std::to_string(i), 4 * (1 + static_cast<int64_t>(rng() % 64)),
                      rng() % 3 ? DataType::kFloat32 : DataType::kInt32);
      if (rng() % 5 == 0) r.reduce_op = ReduceOp::kMin;
      if (rng() % 9 == 0) r.error = "x";
      if (rng() % 9 == 0) r.op = OpType::kBroadcast;
      if (rng() % 3 == 0) r.group = "G" + std::to_string(rng() % 3);
      rs.push_back(r);
    }
    const int64_t threshold = static_cast<int64_t>(rng() % 400);
    const auto plan = plan_fusion(rs, threshold);
    check_plan(rs, plan, threshold);
    // A group's same-key fusable members share a batch when together they fit.
    std::map<std::pair<std::string, Key>, std::vector<size_t>> groups;
    for (size_t i = 0; i < rs.size(); ++i) {
      if (!rs[i].group.empty() && rs[i].ok() && rs[i].op == OpType::kAllreduce) {
        groups[{rs[i].group, key(rs[i])}].push_back(i);
      }
    }
    std::vector<size_t> batch_of(rs.size());
    for (size_t b = 0; b < plan.size(); ++b) {
      for (size_t m : plan[b].members) batch_of[m] = b;
    }
    for (const auto& [g, members] : groups) {
      int64_t total = 0;
      for (size_t m : members) total += num_elements(rs[m].shape) * 4;
      if (threshold <= 0 || total > threshold) continue;
      for (size_t m : members) CHECK(batch_of[m] == batch_of[members[0]]);
    }
  }
}

namespace {

// The planner as first written (ordered maps keyed by group name and key), kept as the
// reference that the faster one must match plan for plan.
std::vector<FusionBatch> reference_plan(const std::vector<Response>& responses, int64_t threshold) {
  auto fusable = [](const Response& r) { return r.ok() && r.op == OpType::kAllreduce; };
  using GroupKey = std::pair<std::string, Key>;
  std::map<GroupKey, int64_t> group_bytes;
  for (const Response& r : responses) {
    if (fusable(r) && !r.group.empty()) group_bytes[{r.group, key(r)}] += r.nbytes_for_rank(0);
  }
  std::map<GroupKey, size_t> group_batch;
  std::vector<int64_t> reserved;
  std::vector<FusionBatch> batches;
  std::map<Key, size_t> open;
  auto start_batch = [&](size_t i, int64_t bytes) {
    FusionBatch b;
    b.members.push_back(i);
    b.offsets.push_back(0);
    b.bytes = bytes;
    batches.push_back(std::move(b));
    reserved.push_back(0);
  };
  for (size_t i = 0; i < responses.size(); ++i) {
    const Response& r = responses[i];
    const int64_t bytes = fusable(r) ? r.nbytes_for_rank(0) : 0;
    if (!fusable(r) || threshold <= 0 || bytes >= threshold) {
      start_batch(i, bytes);
      continue;
    }
    const GroupKey gk{r.group, key(r)};
    const bool keep_group = !r.group.empty() && group_bytes[gk] <= threshold;
    size_t target = batches.size();
    if (auto g = group_batch.find(gk); keep_group && g != group_batch.end()) {
      target = g->second;
      reserved[target] -= bytes;
    } else {
      const int64_t need = keep_group ? group_bytes[gk] : bytes;
      auto it = open.find(key(r));
      if (it != open.end() && batches[it->second].bytes + reserved[it->second] + need <= threshold) {
        target = it->second;
      }
      if (keep_group) {
        group_batch[gk] = target;
        if (target < reserved.size()) reserved[target] += need - bytes;
      }
    }
    if (target < batches.size()) {
      FusionBatch& b = batches[target];
      b.members.push_back(i);
      b.offsets.push_back(b.bytes);
      b.bytes += bytes;
    } else {
      start_batch(i, bytes);
      if (keep_group) reserved.back() = group_bytes[gk] - bytes;
      open[key(r)] = target;
    }
  }
  return batches;
}

}  // namespace

TEST_CASE("the planner matches the reference plan on random lists", "[fusion]") {
  std::mt19937 rng(11);
  FusionPlanner reused;  // one planner for every list: what it keeps must not leak into a plan
  for (int iter = 0; iter < 2000; ++iter) {
    std::vector<Response> rs;
    const int n = 1 + static_cast<int>(rng() % 60);
    for (int i = 0; i < n; ++i) {
      Response r = ar("t" + std::to_string(i), 4 * (1 + static_cast<int64_t>(rng() % 64)),
                      rng() % 3 ? DataType::kFloat32 : DataType::kInt32);
      if (rng() % 5 == 0) r.reduce_op = ReduceOp::kMin;
      if (rng() % 7 == 0) r.postscale = 0.5;
      if (rng() % 11 == 0) r.device = Device::cuda(static_cast<int>(rng() % 2));
      if (rng() % 9 == 0) r.error = "x";
      if (rng() % 9 == 0) r.op = OpType::kBroadcast;
      if (rng() % 2 == 0) r.group = "group-with-a-long-name-" + std::to_string(rng() % 4);
      rs.push_back(r);
    }
    const int64_t threshold = static_cast<int64_t>(rng() % 600);
    const auto plan = plan_fusion(rs, threshold);
    const auto want = reference_plan(rs, threshold);
    const std::vector<FusionBatch>& again = reused.plan(rs, threshold);
    REQUIRE(plan.size() == want.size());
    REQUIRE(again.size() == want.size());
    for (size_t b = 0; b < plan.size(); ++b) {
      CHECK(plan[b].members == want[b].members);
      CHECK(plan[b].offsets == want[b].offsets);
      CHECK(plan[b].bytes == want[b].bytes);
      CHECK(again[b].members == want[b].members);
      CHECK(again[b].offsets == want[b].offsets);
      CHECK(again[b].bytes == want[b].bytes);
    }
  }
}

TEST_CASE("the planner's plan for the same cached responses is the plan of those responses",
          "[fusion]") {
  // A planner reuses its last plan when every response carries the same cache stamp, in the
  // same order, under the same threshold. Lists that repeat, lists with one entry replaced
  // (a new stamp, other bytes or key), uncached responses (stamp 0) among cached ones, and a
  // changed threshold must each get exactly the reference plan of their own responses.
  std::mt19937 rng(23);
  FusionPlanner planner;
  uint64_t next_stamp = 1;
  const auto fresh = [&](int i) {
    Response r = ar("t" + std::to_string(i), 4 * (1 + static_cast<int64_t>(rng() % 64)),
                    rng() % 4 ? DataType::kFloat32 : DataType::kInt32);
    if (rng() % 6 == 0) r.postscale = 0.5;
    if (rng() % 3 == 0) r.group = "g" + std::to_string(rng() % 3);
    r.cache_stamp = next_stamp++;
    return r;
  };
  std::vector<Response> rs;
  for (int i = 0; i < 40; ++i) rs.push_back(fresh(i));
  int64_t threshold = 256;
  int reused = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    const unsigned what = rng() % 8;
    if (what == 0) {  // one entry replaced: new stamp, other bytes
      const size_t i = rng() % rs.size();
      rs[i] = fresh(static_cast<int>(i));
    } else if (what == 1) {  // an uncached response (a full cycle's) in the list
      rs[rng() % rs.size()].cache_stamp = 0;
    } else if (what == 2) {
      threshold = 64 + static_cast<int64_t>(rng() % 512);
    } else if (what == 3 && rs.size() > 2) {  // one fewer ready this cycle
      rs.erase(rs.begin() + static_cast<long>(rng() % rs.size()));
    } else if (what == 4) {
      rs.push_back(fresh(static_cast<int>(rs.size())));
    }  // else: the same list again
    const std::vector<FusionBatch>& got = planner.plan(rs, threshold);
    const auto want = reference_plan(rs, threshold);
    reused += what >= 5 ? 1 : 0;
    REQUIRE(got.size() == want.size());
    for (size_t b = 0; b < got.size(); ++b) {
      REQUIRE(got[b].members == want[b].members);
      REQUIRE(got[b].offsets == want[b].offsets);
      REQUIRE(got[b].bytes == want[b].bytes);
    }
    // Stamps restored on the entries that lost theirs, so later rounds can reuse again.
    for (Response& r : rs) {
      if (r.cache_stamp == 0) r.cache_stamp = next_stamp++;
    }
  }
  CHECK(reused > 1000);
}
