// Copyright horovod_cpp authors. Every rank's check of rank 0's fresh responses against its own
// requests (coordination/response_check.h), and the agreement that makes every rank fail a
// response any rank refused (Controller::set_response_check), with 2, 3 and 4 ranks as threads.
#include <catch2/catch.hpp>
#include <atomic>
#include <chrono>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "coordination/controller.h"
#include "coordination/response_check.h"
#include "coordination/test_faults.h"
#include "coordination/validate.h"
#include "core/handle_state.h"
#include "core/process_set.h"
#include "in_process_control_plane.h"
#include "in_process_data_plane.h"

using namespace hvd;
using namespace hvd::testing;

namespace {

Request make(OpType op, const std::string& name, Shape shape, int rank = 0) {
  Request q;
  q.op = op;
  q.name = name;
  q.shape = std::move(shape);
  q.rank = rank;
  return q;
}

// The response an honest rank 0 builds when every one of `n` ranks sent `per_rank(r)`.
Response honest(int n, const std::function<Request(int)>& per_rank) {
  std::vector<Request> reqs;
  for (int r = 0; r < n; ++r) reqs.push_back(per_rank(r));
  std::vector<const Request*> ptrs;
  for (const Request& q : reqs) ptrs.push_back(&q);
  Response resp = build_response(ptrs);
  REQUIRE(resp.ok());
  return resp;
}

// Checks `r` against `q` (from `rank` of `n`); returns the error text, "" when it passes.
std::string verdict(const Response& r, const Request& q, int rank, int n) {
  const Status s = check_response_against_request(r, asked_for(q), rank, n);
  if (!s.ok()) CHECK(s.code() == ErrorCode::kMismatch);
  return s.ok() ? "" : s.message();
}

}  // namespace

TEST_CASE("an honest response passes every rank's check", "[response_check]") {
  for (int n : {1, 2, 3, 4}) {
    const auto reduce = [](int r) { return make(OpType::kAllreduce, "w", {4, 5}, r); };
    const auto gather = [](int r) { return make(OpType::kAllgather, "g", {r + 1, 3}, r); };
    const auto bcast = [](int r) {
      Request q = make(OpType::kBroadcast, "b", {7}, r);
      q.root = 0;
      return q;
    };
    const auto a2a = [n](int r) {
      Request q = make(OpType::kAlltoall, "a", {2 * n, 2}, r);
      q.splits.assign(static_cast<size_t>(n), 2);
      q.splits[0] = 2 + r % 2;
      q.splits[static_cast<size_t>(n) - 1] -= r % 2;
      if (n == 1) q.splits[0] = 2;
      return q;
    };
    const auto rs = [](int r) { return make(OpType::kReducescatter, "rs", {9, 2}, r); };
    for (const auto& per_rank :
         std::vector<std::function<Request(int)>>{reduce, gather, bcast, a2a, rs}) {
      const Response resp = honest(n, per_rank);
      for (int r = 0; r < n; ++r) {
        INFO(op_type_name(resp.op) << " with " << n << " ranks, rank " << r);
        CHECK(verdict(resp, per_rank(r), r, n).empty());
      }
    }
  }
}

TEST_CASE("a response that differs from the request is refused, naming what differs",
          "[response_check]") {
  const int n = 3;
  const Request q = make(OpType::kAllreduce, "fc.w", {4, 4}, 1);
  const Response good = honest(n, [&](int r) {
    Request x = q;
    x.rank = r;
    return x;
  });
  REQUIRE(verdict(good, q, 1, n).empty());

  Response r = good;
  r.shape = {8, 4};
  CHECK(verdict(r, q, 1, n) ==
        "allreduce 'fc.w': rank 1 asked for another shape (16 elements, first dimension 4), the "
        "response has float32[8,4]");
  r = good;
  r.shape = {2, 8};  // the same number of elements, another shape
  CHECK(verdict(r, q, 1, n).find("another shape") != std::string::npos);
  r = good;
  r.shape = {4, 2, 2};  // the same elements and first dimension
  CHECK(verdict(r, q, 1, n).find("another shape") != std::string::npos);
  r = good;
  r.shape = {16};
  CHECK(verdict(r, q, 1, n).find("another shape") != std::string::npos);
  Request s1 = make(OpType::kAllreduce, "s", {1}, 0);  // a scalar is not a vector of one
  Response rs1 = honest(1, [&](int) { return s1; });
  rs1.shape.clear();
  CHECK(verdict(rs1, s1, 0, 1).find("another shape (1 elements, first dimension 1)") != std::string::npos);
  r = good;
  r.dtype = DataType::kFloat64;
  CHECK(verdict(r, q, 1, n) ==
        "allreduce 'fc.w': rank 1 asked for float32, the response has float64");
  r = good;
  r.op = OpType::kBroadcast;
  CHECK(verdict(r, q, 1, n) ==
        "broadcast 'fc.w': rank 1 asked for allreduce, the response has broadcast");
  r = good;
  r.device = Device::cuda(0);
  CHECK(verdict(r, q, 1, n) == "allreduce 'fc.w': rank 1 asked for cpu, the response has cuda:0");
  r = good;
  r.reduce_op = ReduceOp::kMax;
  CHECK(verdict(r, q, 1, n) ==
        "allreduce 'fc.w': rank 1 asked for op sum, the response has op max");
  r = good;
  r.postscale = 0.5;
  CHECK(verdict(r, q, 1, n).find("rank 1 asked for other scale factors") != std::string::npos);
  r = good;
  r.shape = {-4, 4};
  CHECK(verdict(r, q, 1, n) ==
        "allreduce 'fc.w': for rank 1, the response has a negative dimension");
  r = good;
  r.shape = {int64_t{1} << 40, int64_t{1} << 40};
  CHECK(verdict(r, q, 1, n).find("has too many elements") != std::string::npos);

  Request b = make(OpType::kBroadcast, "b", {5}, 2);
  b.root = 1;
  Response rb = honest(n, [&](int k) {
    Request x = b;
    x.rank = k;
    return x;
  });
  REQUIRE(verdict(rb, b, 2, n).empty());
  rb.root = 0;
  CHECK(verdict(rb, b, 2, n) == "broadcast 'b': rank 2 asked for root 1, the response has root 0");
}

TEST_CASE("allgather and alltoall: own first dimension, scalar shapes, splits and their sums",
          "[response_check]") {
  const int n = 3;
  const auto gather = [](int r) { return make(OpType::kAllgather, "g", {r + 1, 3}, r); };
  const Response good = honest(n, gather);
  Response r = good;
  r.first_dims[2] = 4;
  CHECK(verdict(r, gather(0), 0, n).empty());  // only rank 2 can see its own dimension
  CHECK(verdict(r, gather(2), 2, n) ==
        "allgather 'g': rank 2 asked for a tensor of first dimension 3, the response has first "
        "dimension 4 for it and float32[1,3] at rank 0");
  r = good;
  r.shape = {1, 4};
  CHECK(verdict(r, gather(1), 1, n).find("rank 1 asked for a tensor of first dimension 2") !=
        std::string::npos);
  r = good;
  r.shape.clear();
  CHECK(verdict(r, gather(1), 1, n) ==
        "allgather 'g': for rank 1, the response has a scalar shape");
  r = good;
  r.first_dims.pop_back();
  CHECK(verdict(r, gather(1), 1, n) ==
        "allgather 'g': for rank 1, the response has 2 first dimensions for 3 ranks");
  r = good;
  r.first_dims[0] = std::numeric_limits<int64_t>::max();
  CHECK(verdict(r, gather(1), 1, n).find("overflow") != std::string::npos);

  const auto a2a = [](int k) {
    Request q = make(OpType::kAlltoall, "a", {3, 2}, k);
    q.splits = {1, 1, 1};
    return q;
  };
  const Response ga = honest(n, a2a);
  REQUIRE(verdict(ga, a2a(1), 1, n).empty());
  Response ra = ga;
  ra.all_splits[1 * 3 + 0] = 2;  // rank 1's row: [2,1,1]
  CHECK(verdict(ra, a2a(1), 1, n) ==
        "alltoall 'a': rank 1 asked for other splits, the response has splits [2,1,1] for it");
  CHECK(verdict(ra, a2a(0), 0, n).empty());  // rank 0 receives 2 rows from rank 1: rank 1 refuses
  ra = ga;
  ra.all_splits[2 * 3 + 0] = int64_t{1} << 62;
  CHECK(verdict(ra, a2a(0), 0, n).find("overflow the sizes") != std::string::npos);
  ra = ga;
  ra.all_splits[4] = -1;
  CHECK(verdict(ra, a2a(0), 0, n) == "alltoall 'a': for rank 0, the response has a negative split");
  ra = ga;
  ra.all_splits.pop_back();
  CHECK(verdict(ra, a2a(0), 0, n) ==
        "alltoall 'a': for rank 0, the response has 8 splits for 3 ranks");
}

TEST_CASE("a response refused by one rank fails on every rank; the rest of the cycle runs",
          "[response_check]") {
  for (int n : {2, 3, 4}) {
    for (const std::string mode : {"first_dim", "shape", "scalar", "dtype", "op"}) {
      INFO(n << " ranks, corruption " << mode);
      const std::string bad = std::string(kCorruptPrefix) + "g";
      // Each rank's own requests of the first cycle: the corrupted allgather and a plain one.
      const auto requests = [n](int r, int cycle) {
        std::vector<Request> v;
        if (cycle == 0) {
          v.push_back(make(OpType::kAllgather, std::string(kCorruptPrefix) + "g", {r + 1, 2}, r));
          v.push_back(make(OpType::kAllreduce, "ok", {6}, r));
        } else if (cycle == 1) {
          v.push_back(make(OpType::kAllgather, "next", {2, 2}, r));
        }
        (void)n;
        return v;
      };
      Script s;
      s.ranks = n;
      s.cycles = 2;
      s.options.test_corrupt_response = mode;
      s.input = [&](int r, int cycle) {
        CycleInput in;
        in.requests = requests(r, cycle);
        return in;
      };
      // Set by the ranks' threads (Catch's assertions are for this thread only).
      std::atomic<bool> unknown_name{false};
      s.response_check = [&](int rank) -> Controller::ResponseCheck {
        return [rank, n, requests, &unknown_name](const std::vector<Response>& rs,
                                                  std::vector<std::string>* problems) {
          std::map<std::string, Request> mine;
          for (int c = 0; c < 2; ++c) {
            for (Request& q : requests(rank, c)) mine[q.name] = q;
          }
          for (size_t i = 0; i < rs.size(); ++i) {
            if (!rs[i].ok()) continue;
            const auto it = mine.find(rs[i].name);
            if (it == mine.end()) {
              unknown_name = true;
              (*problems)[i] = "a response for a tensor no rank submitted";
              continue;
            }
            const Status st = check_response_against_request(rs[i], asked_for(it->second), rank, n);
            if (!st.ok()) (*problems)[i] = st.message();
          }
        };
      };
      const RunResult res = run_script(s);
      REQUIRE(res.errors.empty());
      REQUIRE_FALSE(unknown_name.load());
      for (int r = 0; r < n; ++r) {
        const std::vector<Response> all = res.all_responses(r);
        REQUIRE(all.size() == 3);
        std::map<std::string, Response> by_name;
        for (const Response& x : all) by_name[x.name] = x;
        const Response& refused = by_name.at(bad);
        INFO("rank " << r << ": " << refused.error);
        CHECK_FALSE(refused.ok());
        CHECK(refused.error.rfind("'" + bad + "': rank 0's response does not match",
                                  std::string::npos) != std::string::npos);
        // Who refused: the last rank alone for "first_dim", every rank otherwise.
        const auto names = [&](int k) {
          const std::string rk = std::to_string(k);
          return refused.error.find("rank " + rk + " asked for") != std::string::npos ||
                 refused.error.find("for rank " + rk + ",") != std::string::npos;
        };
        CHECK(names(n - 1));
        CHECK(names(0) == (mode != "first_dim"));
        CHECK(by_name.at("ok").ok());
        CHECK(by_name.at("next").ok());
        // Identical text on every rank, and the refused response was not cached.
        for (const Response& x : res.all_responses(0)) {
          if (x.name == bad) CHECK(refused.error == x.error);
        }
        CHECK_FALSE(res.controllers[static_cast<size_t>(r)]->cache().find(bad).has_value());
      }
    }
  }
}

namespace {

// One tensor submitted to a process set: its request, memory and handle.
std::shared_ptr<detail::HandleState> submit(ProcessSetState& set, OpType op,
                                            const std::string& name, std::vector<float>* data,
                                            Shape shape, std::vector<int64_t> splits = {}) {
  TensorView input(data->data(), DataType::kFloat32, shape);
  TensorSubmit t(op, &name, &input, nullptr);
  if (!splits.empty()) t.splits = &splits;
  SubmitCommon common;
  auto h = std::make_shared<detail::HandleState>(name, 1);
  common.handle = h;
  throw_if_error(set.enqueue(&t, 1, common));
  return h;
}

Status finish(const std::shared_ptr<detail::HandleState>& h) {
  if (!h->wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(30))) {
    return Status::Backend("'" + h->name() + "' did not complete within 30 s");
  }
  return h->status();
}

}  // namespace

TEST_CASE("process sets: a corrupted response fails on every rank, the next collective works",
          "[response_check]") {
  const int n = GENERATE(2, 3, 4);
  const std::string mode =
      GENERATE("shape", "dtype", "op", "reduce", "scalar", "first_dim", "splits");
  INFO(n << " ranks, corruption " << mode);
  Config config;
  config.cycle_time_ms = 0.5;
  config.test_corrupt_response = mode;
  InProcessSets sets(n, config);
  const bool rows = mode == "scalar" || mode == "first_dim";
  const OpType op = mode == "splits" ? OpType::kAlltoall
                    : rows           ? OpType::kAllgather
                                     : OpType::kAllreduce;
  const std::string bad = std::string(kCorruptPrefix) + op_type_name(op);
  const std::string err = on_ranks(n, [&](int rank) {
    ProcessSetState& set = sets.set(rank);
    std::vector<float> x(static_cast<size_t>(2 * n * 3), 1.0f), ok(5, static_cast<float>(rank));
    std::vector<int64_t> splits;
    if (op == OpType::kAlltoall) splits.assign(static_cast<size_t>(n), 2);
    auto hb = submit(set, op, bad, &x, {2 * n, 3}, splits);
    const Status sb = finish(hb);
    if (sb.ok()) throw std::runtime_error("'" + bad + "' ran");
    if (sb.message().find("'" + bad + "': rank 0's response does not match") == std::string::npos) {
      throw std::runtime_error("unexpected error: " + sb.message());
    }
    for (float v : x) {
      if (v != 1.0f) throw std::runtime_error("the refused tensor was written");
    }
    // The next collective runs, with its sum.
    auto ho = submit(set, OpType::kAllreduce, "after", &ok, {5});
    throw_if_error(finish(ho));
    const float want = static_cast<float>(n * (n - 1) / 2);
    for (float v : ok) {
      if (v != want) throw std::runtime_error("'after' = " + std::to_string(v));
    }
  });
  CHECK(err.empty());
  INFO(err);
}

TEST_CASE("a request's digest counts its elements as num_elements() does", "[response_check]") {
  const int64_t big = int64_t{1} << 40;
  for (const Shape& s : std::vector<Shape>{{}, {0}, {7}, {3, 0, 5}, {2, 3, 4, 5, 6}, {big, big},
                                           {big, big, 0}, {big, 1, big, 2}}) {
    Request q = make(OpType::kAllreduce, "x", s);
    INFO(shape_str(s));
    CHECK(digest_of(q).numel == num_elements(s));
    CHECK(digest_of(q).dim0 == (s.empty() ? -1 : s[0]));
  }
  // The digests tell apart what differs.
  const Request a = make(OpType::kAllreduce, "x", {4, 6});
  Request b = a;
  b.shape = {6, 4};
  CHECK(digest_of(a).shape_hash != digest_of(b).shape_hash);
  b = a;
  b.prescale = 0.5;
  CHECK(digest_of(a).params_hash != digest_of(b).params_hash);
}
