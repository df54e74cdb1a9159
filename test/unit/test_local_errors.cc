// Copyright horovod_cpp authors. Errors that only some ranks can see, and messages that cannot
// be decoded: every rank must get the same outcome, none may be left waiting.
#include <catch2/catch.hpp>
#include <string>
#include <thread>
#include <vector>

#include "coordination/controller.h"
#include "coordination/validate.h"
#include "coordination/wire.h"
#include "in_process_control_plane.h"

using namespace hvd;
using namespace hvd::testing;

namespace {

Request req(const std::string& name, Shape shape = {4, 5}) {
  Request q;
  q.name = name;
  q.shape = std::move(shape);
  return q;
}

std::string errors_of(const RunResult& res) {
  std::string all;
  for (const auto& e : res.errors) all += e + "\n";
  return all;
}

}  // namespace

TEST_CASE("a request carrying a local error fails the tensor on every rank, naming the rank",
          "[local_errors]") {
  const int n = GENERATE(2, 3, 4);
  const bool cached_first = GENERATE(false, true);
  const int odd = n - 1;
  Script s;
  s.ranks = n;
  s.cycles = 6;
  s.input = [&](int rank, int cycle) {
    CycleInput in;
    if (cached_first && cycle == 0) in.requests.push_back(req("t"));
    if (cycle == 2) {
      Request q = req("t");
      if (rank == odd) q.error = "allreduce 't': input data pointer is null";
      in.requests.push_back(q);
    }
    if (cycle == 4) in.requests.push_back(req("t"));  // the next one works again
    return in;
  };
  RunResult res = run_script(s);
  INFO(errors_of(res));
  REQUIRE(res.errors.empty());
  for (int r = 0; r < n; ++r) {
    std::vector<Response> all = res.all_responses(r);
    std::vector<const Response*> failed, ok;
    for (const Response& x : all) (x.ok() ? ok : failed).push_back(&x);
    INFO("rank " << r << ": " << describe(all));
    REQUIRE(failed.size() == 1);
    CHECK(ok.size() == (cached_first ? 2u : 1u));
    CHECK_THAT(failed[0]->error, Catch::Contains("allreduce 't'"));
    CHECK_THAT(failed[0]->error, Catch::Contains("rank " + std::to_string(odd) +
                                                 ": allreduce 't': input data pointer is null"));
  }
}

TEST_CASE("local errors of several ranks are all named", "[local_errors]") {
  Request a = req("x"), b = req("x"), c = req("x");
  b.error = "reason one";
  c.error = "reason two";
  Response r = build_response({&a, &b, &c});
  CHECK_FALSE(r.ok());
  CHECK_THAT(r.error, Catch::Contains("2 ranks"));
  CHECK_THAT(r.error, Catch::Contains("rank 1: reason one"));
  CHECK_THAT(r.error, Catch::Contains("rank 2: reason two"));
}

TEST_CASE("MPI size limits fail the tensor on every rank, naming the rank", "[local_errors]") {
  // Every rank sends all its 2^30 one-byte rows to rank 0: rank 0 alone would receive 2^31+.
  const int n = 3;
  std::vector<Request> reqs(n);
  std::vector<const Request*> ptrs;
  for (int r = 0; r < n; ++r) {
    reqs[r] = req("a2a", {1ll << 30, 1});
    reqs[r].op = OpType::kAlltoall;
    reqs[r].dtype = DataType::kUInt8;
    reqs[r].splits = {1ll << 30, 0, 0};
    ptrs.push_back(&reqs[r]);
  }
  Response r = build_response(ptrs);
  CHECK_THAT(r.error, Catch::Contains("rank 0 would send"));
  CHECK_THAT(r.error, Catch::Contains("2^31-1"));
  // CUDA tensors go through NCCL, without that limit.
  for (auto& q : reqs) q.device = Device{Device::Kind::kCUDA, -1};
  CHECK(build_response(ptrs).ok());
  // Reducescatter counts elements.
  Request rs1 = req("rs", {1ll << 31, 1}), rs2 = rs1;
  rs1.op = rs2.op = OpType::kReducescatter;
  Response big = build_response({&rs1, &rs2});
  CHECK_THAT(big.error, Catch::Contains("2^31-1 elements"));
}

TEST_CASE("CUDA collectives are bounded too: sizes near int64 overflow fail on every rank",
          "[local_errors]") {
  const int n = 2;
  const Device cuda{Device::Kind::kCUDA, -1};
  // Alltoall: rank 1 announces 2^62 rows of 8 bytes for rank 0 (saturates to 2^63-1 bytes).
  std::vector<Request> reqs(n);
  for (int r = 0; r < n; ++r) {
    reqs[r] = req("a2a.cuda", {1ll << 62, 2});
    reqs[r].op = OpType::kAlltoall;
    reqs[r].dtype = DataType::kFloat32;
    reqs[r].device = cuda;
    reqs[r].splits = {r == 1 ? 1ll << 62 : 0, 0};
  }
  Response a = build_response({&reqs[0], &reqs[1]});
  CHECK_THAT(a.error, Catch::Contains("alltoall 'a2a.cuda'"));
  CHECK_THAT(a.error, Catch::Contains("rank 0 would send 0 and receive 9223372036854775807"));
  CHECK_THAT(a.error, Catch::Contains("a CUDA collective moves at most 2^48 bytes"));
  // Allgather: 2^40 rows of 512 bytes = 2^49 bytes gathered.
  Request g0 = req("ag.cuda", {1ll << 40, 128}), g1 = g0;
  g0.op = g1.op = OpType::kAllgather;
  g0.dtype = g1.dtype = DataType::kFloat32;
  g0.device = g1.device = cuda;
  g1.shape[0] = 0;
  Response g = build_response({&g0, &g1});
  CHECK_THAT(g.error, Catch::Contains("allgather 'ag.cuda'"));
  CHECK_THAT(g.error, Catch::Contains("the gathered result is 562949953421312 bytes"));
  // Within the bound (2^30 rows): accepted.
  g0.shape[0] = 1ll << 30;
  CHECK(build_response({&g0, &g1}).ok());
}

namespace {

// Rank 1's plane that garbles what it sends in the gather (a rank running other code, or
// corrupted memory).
class GarblingPlane : public InProcessControlPlane {
 public:
  using InProcessControlPlane::InProcessControlPlane;
  Status gather(const std::string& /*mine*/, std::vector<std::string>* all) override {
    return InProcessControlPlane::gather("\x01garbage", all);
  }
};

}  // namespace

TEST_CASE("a request list rank 0 cannot decode ends the job on every rank, naming the rank",
          "[local_errors]") {
  const int n = GENERATE(2, 3);
  const int bad = 1;
  InProcessHub hub(n, 10.0);
  std::vector<std::unique_ptr<InProcessControlPlane>> planes;
  std::vector<std::unique_ptr<Controller>> controllers;
  for (int r = 0; r < n; ++r) {
    planes.push_back(r == bad ? std::make_unique<GarblingPlane>(&hub, r)
                              : std::make_unique<InProcessControlPlane>(&hub, r));
    controllers.push_back(std::make_unique<Controller>(planes.back().get(), ControllerOptions()));
  }
  std::vector<Status> status(n);
  std::vector<CycleResult> out(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      Request q = req("t");
      q.rank = r;
      status[r] = controllers[r]->run_cycle({q}, false, &out[r]);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r << ": " << status[r].message());
    REQUIRE(status[r].ok());  // no rank left in the broadcast (the hub would time out)
    CHECK(out[r].shutdown);
    CHECK(out[r].fatal);
    CHECK_THAT(out[r].shutdown_reason, Catch::Contains("could not decode the requests of rank 1"));
  }
}

TEST_CASE("wire format 3 carries local errors and the fatal flag", "[local_errors]") {
  RequestList rl;
  rl.requests.push_back(req("t"));
  rl.requests[0].error = "why";
  RequestList back;
  REQUIRE(deserialize(serialize(rl), &back).ok());
  CHECK(back.requests[0].error == "why");
  ResponseList sl;
  sl.shutdown = sl.fatal = true;
  sl.shutdown_reason = "stall";
  ResponseList sback;
  REQUIRE(deserialize(serialize(sl), &sback).ok());
  CHECK(sback.shutdown);
  CHECK(sback.fatal);
  CHECK(serialize(sl)[1] == static_cast<char>(kWireFormatVersion));
  CHECK(kWireFormatVersion == 3);
}

TEST_CASE("in a process set mismatches and local errors name global ranks", "[local_errors]") {
  Request a = req("x"), b = req("x", {4, 6}), c = req("x");
  const std::vector<int> names = {3, 5, 8};  // the set's members, as global ranks
  CHECK(build_response({&a, &b, &c}, names).error ==
        "allreduce 'x': ranks 3,8 sent float32[4,5], rank 5 sent float32[4,6]");
  b = req("x");
  c.error = "reason";
  CHECK_THAT(build_response({&a, &b, &c}, names).error, Catch::Contains("rank 8: reason"));
  // Without names the ranks are the set's own.
  CHECK_THAT(build_response({&a, &b, &c}).error, Catch::Contains("rank 2: reason"));
}
