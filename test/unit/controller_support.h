// Copyright horovod_cpp authors. What the controller tests share (test_controller.cc,
// test_controller_stalls.cc): requests, and checks every rank's results against the script.
#pragma once

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "coordination/controller.h"
#include "in_process_control_plane.h"

namespace hvd {
namespace testing {

inline Request req(const std::string& name, Shape shape = {4, 5}, DataType dtype = DataType::kFloat32,
            OpType op = OpType::kAllreduce) {
  Request q;
  q.op = op;
  q.name = name;
  q.shape = std::move(shape);
  q.dtype = dtype;
  return q;
}

inline Request grouped(Request q, const std::string& group, int size) {
  q.group = group;
  q.group_size = size;
  return q;
}

// "rank 2" / "ranks 0,1": the documented way messages list ranks.
inline std::string ranks_text(const std::vector<int>& ranks) {
  std::ostringstream os;
  os << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size(); ++i) os << (i ? "," : "") << ranks[i];
  return os.str();
}

inline std::vector<int> range_except(int n, int skip) {
  std::vector<int> v;
  for (int r = 0; r < n; ++r) {
    if (r != skip) v.push_back(r);
  }
  return v;
}

inline void require_ok(const RunResult& res) {
  std::string all;
  for (const auto& e : res.errors) all += e + "\n";
  INFO(all);
  REQUIRE(res.errors.empty());
}

// Every rank got the same responses, in the same order, in the same cycles, and agrees on
// shutdown and on whether a full cycle ran.
inline void require_identical(const RunResult& res) {
  const auto& r0 = res.records[0];
  for (size_t r = 1; r < res.records.size(); ++r) {
    const auto& rr = res.records[r];
    REQUIRE(rr.size() == r0.size());
    for (size_t c = 0; c < r0.size(); ++c) {
      const CycleResult& a = r0[c].result;
      const CycleResult& b = rr[c].result;
      INFO("rank " << r << " cycle " << c << "\n rank 0: " << describe(a.responses)
                   << "\n rank " << r << ": " << describe(b.responses));
      REQUIRE(a.responses.size() == b.responses.size());
      for (size_t i = 0; i < a.responses.size(); ++i) {
        CHECK(a.responses[i].name == b.responses[i].name);
        CHECK(a.responses[i].op == b.responses[i].op);
        CHECK(a.responses[i].error == b.responses[i].error);
        CHECK(a.responses[i].shape == b.responses[i].shape);
        CHECK(a.responses[i].dtype == b.responses[i].dtype);
        CHECK(a.responses[i].first_dims == b.responses[i].first_dims);
      }
      CHECK(a.shutdown == b.shutdown);
      CHECK(a.shutdown_reason == b.shutdown_reason);
      CHECK(a.full_cycle == b.full_cycle);
      CHECK(r0[c].cache_size == rr[c].cache_size);
      CHECK(r0[c].cache_bits == rr[c].cache_bits);
    }
  }
}

// Names of the responses of one cycle.
inline std::multiset<std::string> names_in(const CycleRecord& rec) {
  std::multiset<std::string> s;
  for (const auto& r : rec.result.responses) s.insert(r.name);
  return s;
}

inline const Response* find_response(const CycleRecord& rec, const std::string& name) {
  for (const auto& r : rec.result.responses) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

}  // namespace testing
}  // namespace hvd
