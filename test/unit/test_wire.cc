// Copyright horovod_cpp authors. Wire format: round trips with every field set; truncated and
// corrupted input is an error, never a crash.
#include <limits>
#include <random>
#include <string>

#include <catch2/catch.hpp>

#include "coordination/wire.h"

using namespace hvd;

namespace {

Request full_request(int i) {
  Request q;
  q.rank = 3 + i;
  q.op = static_cast<OpType>(i % (kMaxOpType + 1));
  q.name = "layer" + std::to_string(i) + ".weight\xc3\xa9";  // non-ASCII bytes too
  q.dtype = static_cast<DataType>(i % 10);
  q.shape = {7, -1 + i, 1LL << 40};
  q.device = Device::cuda(i);
  q.reduce_op = static_cast<ReduceOp>(i % 5);
  q.prescale = 0.125 * (i + 1);
  q.postscale = -3.5e300;
  q.root = 2 + i;
  q.group = "grp" + std::to_string(i);
  q.group_size = 5 + i;
  q.splits = {1, 0, 2 + i, std::numeric_limits<int64_t>::min()};
  return q;
}

Response full_response(int i) {
  Response r;
  r.op = static_cast<OpType>((i + 1) % (kMaxOpType + 1));
  r.name = "t" + std::to_string(i);
  r.error = i % 2 ? "allreduce 't': rank 0 sent float32[4], rank 1 sent float32[5]" : "";
  r.dtype = static_cast<DataType>((i + 3) % 10);
  r.shape = {i, 2, 3};
  r.device = i % 2 ? Device::cuda(7) : Device::cpu();
  r.reduce_op = static_cast<ReduceOp>((i + 2) % 5);
  r.prescale = 1.0 / 3;
  r.postscale = std::numeric_limits<double>::denorm_min();
  r.root = -1 - i;
  r.group = i % 2 ? "" : "g";
  r.group_size = i;
  r.first_dims = {4, 0, std::numeric_limits<int64_t>::max()};
  r.all_splits = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  return r;
}

void require_equal(const Response& a, const Response& b) {
  CHECK(a.op == b.op);
  CHECK(a.name == b.name);
  CHECK(a.error == b.error);
  CHECK(a.dtype == b.dtype);
  CHECK(a.shape == b.shape);
  CHECK(a.device == b.device);
  CHECK(a.reduce_op == b.reduce_op);
  CHECK(a.prescale == b.prescale);
  CHECK(a.postscale == b.postscale);
  CHECK(a.root == b.root);
  CHECK(a.group == b.group);
  CHECK(a.group_size == b.group_size);
  CHECK(a.first_dims == b.first_dims);
  CHECK(a.all_splits == b.all_splits);
}

RequestList sample_requests() {
  RequestList l;
  for (int i = 0; i < 7; ++i) l.requests.push_back(full_request(i));
  l.shutdown = true;
  l.pending_cache_bits = {0, 5, 4000000000u};
  return l;
}

ResponseList sample_responses() {
  ResponseList l;
  for (int i = 0; i < 7; ++i) l.responses.push_back(full_response(i));
  l.shutdown = true;
  l.shutdown_reason = "horovod_cpp was shut down: rank 1 called shutdown()";
  return l;
}

}  // namespace

TEST_CASE("request list round trip", "[wire]") {
  const RequestList in = sample_requests();
  RequestList out;
  REQUIRE(deserialize(serialize(in), &out).ok());
  REQUIRE(out.requests.size() == in.requests.size());
  for (size_t i = 0; i < in.requests.size(); ++i) {
    INFO("request " << i);
    CHECK(out.requests[i] == in.requests[i]);
    CHECK(out.requests[i].splits == in.requests[i].splits);
  }
  CHECK(out.shutdown);
  CHECK(out.pending_cache_bits == in.pending_cache_bits);

  RequestList empty, out2;
  out2.shutdown = true;
  REQUIRE(deserialize(serialize(empty), &out2).ok());
  CHECK(out2.requests.empty());
  CHECK_FALSE(out2.shutdown);
  CHECK(out2.pending_cache_bits.empty());
}

TEST_CASE("response list round trip", "[wire]") {
  const ResponseList in = sample_responses();
  ResponseList out;
  REQUIRE(deserialize(serialize(in), &out).ok());
  REQUIRE(out.responses.size() == in.responses.size());
  for (size_t i = 0; i < in.responses.size(); ++i) {
    INFO("response " << i);
    require_equal(out.responses[i], in.responses[i]);
  }
  CHECK(out.shutdown);
  CHECK(out.shutdown_reason == in.shutdown_reason);
}

TEST_CASE("one kind of list is not accepted as the other", "[wire]") {
  RequestList rq;
  ResponseList rs;
  CHECK_FALSE(deserialize(serialize(sample_responses()), &rq).ok());
  CHECK_FALSE(deserialize(serialize(sample_requests()), &rs).ok());
  CHECK_FALSE(deserialize(std::string(), &rq).ok());
  CHECK_FALSE(deserialize(std::string(), &rs).ok());
}

TEST_CASE("every truncation is an error", "[wire]") {
  const std::string rq = serialize(sample_requests());
  const std::string rs = serialize(sample_responses());
  for (size_t len = 0; len < rq.size(); ++len) {
    RequestList out;
    INFO("request list cut to " << len << " of " << rq.size());
    CHECK_FALSE(deserialize(rq.substr(0, len), &out).ok());
  }
  for (size_t len = 0; len < rs.size(); ++len) {
    ResponseList out;
    INFO("response list cut to " << len << " of " << rs.size());
    CHECK_FALSE(deserialize(rs.substr(0, len), &out).ok());
  }
  // Trailing garbage too.
  RequestList o1;
  ResponseList o2;
  CHECK_FALSE(deserialize(rq + "x", &o1).ok());
  CHECK_FALSE(deserialize(rs + "x", &o2).ok());
}

TEST_CASE("corrupted messages never crash and a failure leaves the output alone", "[wire]") {
  const std::string rq = serialize(sample_requests());
  const std::string rs = serialize(sample_responses());
  std::mt19937 rng(42);
  int rejected = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    const bool req_list = iter % 2 == 0;
    std::string m = req_list ? rq : rs;
    // 1-4 random bit flips or byte overwrites (often in a length field: set huge values),
    // then possibly a random truncation.
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = rng() % m.size();
      switch (rng() % 3) {
        case 0: m[pos] = static_cast<char>(m[pos] ^ (1 << (rng() % 8))); break;
        case 1: m[pos] = static_cast<char>(0xFF); break;
        default: m[pos] = static_cast<char>(rng()); break;
      }
    }
    if (rng() % 4 == 0) m.resize(rng() % m.size());
    if (req_list) {
      RequestList out;
      out.pending_cache_bits = {99};
      Status st = deserialize(m, &out);
      if (!st.ok()) {
        ++rejected;
        CHECK(out.pending_cache_bits == std::vector<uint32_t>{99});
        CHECK_THAT(st.message(), Catch::Contains("malformed"));
      }
    } else {
      ResponseList out;
      out.shutdown_reason = "untouched";
      Status st = deserialize(m, &out);
      if (!st.ok()) {
        ++rejected;
        CHECK(out.shutdown_reason == "untouched");
      }
    }
  }
  CHECK(rejected > 1000);  // the fuzzer does reach the error paths
}

TEST_CASE("out-of-range enums are rejected", "[wire]") {
  RequestList l;
  l.requests.push_back(full_request(0));
  const std::string good = serialize(l);
  // Layout: tag, version, shutdown, u32 count, then the request: i32 rank, u8 op, ...
  const size_t op_pos = 3 + 4 + 4;
  RequestList out;
  REQUIRE(deserialize(good, &out).ok());
  std::string bad = good;
  bad[op_pos] = static_cast<char>(kMaxOpType + 1);
  CHECK_FALSE(deserialize(bad, &out).ok());
  bad = good;
  bad[1] = static_cast<char>(bad[1] + 1);  // unknown version
  CHECK_FALSE(deserialize(bad, &out).ok());
}

// Found with the fuzz_controller target (test/fuzz/regressions/fuzz_controller/
// alltoall_response_short_splits): an alltoall response with fewer splits than ranks x ranks
// was cached, and the next matching request read past the end of all_splits.
TEST_CASE("a response whose per-rank vectors do not fit the set is rejected", "[wire]") {
  Response a2a;
  a2a.op = OpType::kAlltoall;
  a2a.name = "tokens";
  a2a.shape = {4, 2};
  a2a.first_dims = {5, 4};
  a2a.all_splits = {1, 3};  // 2 ranks need 4
  Request q;
  q.op = OpType::kAlltoall;
  q.name = "tokens";
  q.shape = {4, 2};
  q.splits = {1, 3};
  CHECK_FALSE(a2a.matches(q, 1));  // no read past the two splits (ASan checks)

  ResponseList list;
  list.responses.push_back(a2a);
  Status st = check_response_list(list, 2);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.message(), Catch::Contains("alltoall 'tokens'") && Catch::Contains("4") &&
                               Catch::Contains("has 2"));
  list.responses[0].all_splits = {1, 3, 1, 3};
  CHECK(check_response_list(list, 2).ok());
  list.responses[0].all_splits = {1, 3, -1, 3};
  CHECK_FALSE(check_response_list(list, 2).ok());

  Response ag;
  ag.op = OpType::kAllgather;
  ag.name = "emb";
  ag.shape = {5, 8};
  ag.first_dims = {5};
  list.responses = {ag};
  st = check_response_list(list, 3);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.message(), Catch::Contains("allgather 'emb'") && Catch::Contains("has 1"));
  list.responses[0].first_dims = {5, 0, 7};
  CHECK(check_response_list(list, 3).ok());
  list.responses[0].shape = {5, -8};
  CHECK_FALSE(check_response_list(list, 3).ok());
  // An error response carries only its message: nothing else is checked.
  list.responses[0].error = "allgather 'emb': rank 0 sent float32, rank 1 sent int32";
  CHECK(check_response_list(list, 3).ok());
}
