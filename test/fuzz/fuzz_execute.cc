// Copyright horovod_cpp authors. Fuzz target: corrupted responses through the whole path after
// the negotiation.
//
// One to three ranks (threads, the in-process planes of test/unit) submit one to four tensors
// each: allreduce, allgather, broadcast, alltoall and reducescatter of fuzzer-chosen dtype,
// shape, per-rank first dimension, splits, root and reduce op, each in a heap block of exactly
// its size (so ASan sees any access past it). Rank 0's broadcasts are corrupted by the input
// on their way out: fields of the responses changed (shape, dtype, op, first dimensions,
// splits, root, reduce op, scale factors, device, error) or bytes of the message overwritten.
// Every rank then runs the real path: the decoder, check_response_list(), its check of each
// response against its own request, the agreement on the verdicts (its findings exchange is
// corrupted too), the executor and the CPU transport. Nothing may read or write out of bounds,
// overflow or hang; every tensor completes on every rank, and a tensor fails on one rank only
// if it fails on all.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/fatal.h"
#include "common/logging.h"
#include "coordination/wire.h"
#include "core/handle_state.h"
#include "core/process_set.h"
#include "fuzz_input.h"
#include "in_process_control_plane.h"
#include "in_process_data_plane.h"

namespace {

using namespace hvd;

constexpr OpType kOps[] = {OpType::kAllreduce, OpType::kAllgather, OpType::kBroadcast,
                           OpType::kAlltoall, OpType::kReducescatter};
constexpr DataType kTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kInt32,
                               DataType::kUInt8, DataType::kFloat16};

// What every rank submits of one tensor (rank r's first dimension and splits differ).
struct Plan {
  OpType op;
  DataType dtype;
  Shape shape;                               // dimension 0 is per rank for allgather, alltoall
  std::vector<int64_t> dim0;                 // per rank
  std::vector<std::vector<int64_t>> splits;  // alltoall: per rank
  int32_t root = 0;
  ReduceOp reduce_op = ReduceOp::kSum;
};

Plan plan_of(fuzz::FuzzInput& in, int n) {
  Plan p;
  p.op = kOps[in.byte() % 5];
  p.dtype = kTypes[in.byte() % 5];
  const bool rows =
      p.op == OpType::kAllgather || p.op == OpType::kAlltoall || p.op == OpType::kReducescatter;
  const int ndim = in.byte() % 4;
  for (int d = 0; d < (rows ? std::max(ndim, 1) : ndim); ++d) p.shape.push_back(in.byte() % 5);
  const bool varies = p.op == OpType::kAllgather || p.op == OpType::kAlltoall;
  for (int r = 0; r < n; ++r)
    p.dim0.push_back(varies ? in.byte() % 6 : (p.shape.empty() ? -1 : p.shape[0]));
  if (p.op == OpType::kAlltoall) {
    for (int r = 0; r < n; ++r) {
      std::vector<int64_t> s(static_cast<size_t>(n), 0);
      int64_t left = p.dim0[static_cast<size_t>(r)];
      for (int j = 0; j + 1 < n; ++j) {
        s[static_cast<size_t>(j)] = in.byte() % (left + 1);
        left -= s[static_cast<size_t>(j)];
      }
      s.back() = left;
      p.splits.push_back(s);
    }
  }
  p.root = in.byte() % n;
  p.reduce_op = p.op == OpType::kReducescatter
                    ? (in.byte() % 2 ? ReduceOp::kAverage : ReduceOp::kSum)
                    : static_cast<ReduceOp>(in.byte() % 4);
  return p;
}

// Changes one field of one response, as the input says.
void corrupt(fuzz::FuzzInput& in, Response* r) {
  const uint64_t v = in.word();
  const int64_t small = static_cast<int64_t>(v % 9) - 2;  // -2 .. 6
  const int64_t value = (v >> 8) & 1 ? small : static_cast<int64_t>(v);
  auto pick = [&](auto& vec) -> int64_t* {
    return vec.empty() ? nullptr : &vec[static_cast<size_t>((v >> 16) % vec.size())];
  };
  switch (in.byte() % 14) {
    case 0:
      if (int64_t* d = pick(r->shape)) *d = value;
      break;
    case 1:
      r->shape.push_back(small);
      break;
    case 2:
      if (!r->shape.empty()) r->shape.pop_back();
      break;
    case 3:
      r->dtype = static_cast<DataType>(v % 10);
      break;
    case 4:
      r->op = static_cast<OpType>(v % 7);
      break;
    case 5:
      if (int64_t* d = pick(r->first_dims)) *d = value;
      break;
    case 6:
      if (int64_t* d = pick(r->all_splits)) *d = value;
      break;
    case 7:
      r->root = static_cast<int32_t>(value);
      break;
    case 8:
      r->reduce_op = static_cast<ReduceOp>(v % 5);
      break;
    case 9:
      r->prescale = static_cast<double>(small);
      break;
    case 10:
      r->device = Device::cuda(static_cast<int>(v % 2));
      break;
    case 11:
      r->error = "corrupted";
      break;
    case 12:
      r->first_dims.push_back(small);
      break;
    default:
      r->all_splits.push_back(small);
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    set_log_level(LogLevel::kFatal);
    set_fatal_grace(0);  // a message no rank decodes stops the sets: no watchdog ending us
    return true;
  }();
  (void)quiet;
  fuzz::FuzzInput in(data, size);
  const int n = 1 + in.byte() % 3;
  const int k = 1 + in.byte() % 4;
  std::vector<Plan> plans;
  for (int t = 0; t < k; ++t) plans.push_back(plan_of(in, n));
  const bool raw = in.byte() % 4 == 0;  // overwrite bytes of the message instead of fields

  Config config;
  config.cycle_time_ms = 0.2;
  testing::InProcessSets sets(n, config);
  // Rank 0's broadcasts (response lists, then the findings of the agreement) on their way out.
  sets.control(0).set_broadcast_filter([&in, raw](std::string* blob) {
    if (in.empty()) return;
    if (raw) {
      if (blob->empty()) return;
      for (int i = in.byte() % 4; i >= 0; --i) {
        (*blob)[in.word() % blob->size()] = static_cast<char>(in.byte());
      }
      return;
    }
    ResponseList list;
    if (!deserialize(*blob, &list).ok() || list.responses.empty()) return;
    for (int i = in.byte() % 4; i >= 0 && !in.empty(); --i) {
      corrupt(in, &list.responses[in.byte() % list.responses.size()]);
    }
    *blob = serialize(list);
  });

  // Every rank's tensors, each in a heap block of exactly its bytes.
  std::vector<std::vector<std::unique_ptr<unsigned char[]>>> memory(static_cast<size_t>(n));
  std::vector<std::vector<std::shared_ptr<detail::HandleState>>> handles(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    for (int t = 0; t < k; ++t) {
      const Plan& p = plans[static_cast<size_t>(t)];
      const std::string name = "t" + std::to_string(t);
      Shape shape = p.shape;
      if (!shape.empty()) shape[0] = p.dim0[static_cast<size_t>(r)];
      const size_t bytes = static_cast<size_t>(num_elements(shape)) * dtype_size(p.dtype);
      memory[static_cast<size_t>(r)].emplace_back(new unsigned char[bytes == 0 ? 1 : bytes]());
      TensorView input(memory[static_cast<size_t>(r)].back().get(), p.dtype, shape);
      std::vector<int64_t> splits;
      TensorSubmit ts(p.op, &name, &input, nullptr);
      if (p.op == OpType::kAlltoall) {
        splits = p.splits[static_cast<size_t>(r)];
        ts.splits = &splits;
      }
      ts.root = p.root;
      ts.reduce_op = p.reduce_op;
      SubmitCommon common;
      common.handle = std::make_shared<detail::HandleState>(name, 1);
      handles[static_cast<size_t>(r)].push_back(common.handle);
      // Each tensor is a submission of its own, so a corrupted cycle may stop a set before
      // this rank's later tensors: those are refused (the set stopped) and count as failed
      // here; the other ranks never see them, so they cannot succeed anywhere.
      const Status s = sets.set(r).enqueue(&ts, 1, common);
      if (!s.ok()) {
        HVD_FUZZ_CHECK(s.code() == ErrorCode::kShutdown);
        handles[static_cast<size_t>(r)].back()->complete(s);
      }
    }
  }
  // Every tensor completes, or is left unanswered: rank 0 answers every tensor, so a corrupted
  // rank 0 can drop one from its list (a renamed response is refused on every rank, and the
  // tensor it stood for never gets one). That is a stall, which no rank but rank 0 times out
  // (docs/security.md); here the harness ends it as a job's shutdown would: the sets stop and
  // every pending handle fails. Either way, every tensor ends failed on all ranks or on none.
  const auto soon = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  bool unanswered = false;
  for (const auto& rank_handles : handles) {
    for (const auto& h : rank_handles) unanswered |= !h->wait_until(soon);
  }
  if (unanswered) sets.shutdown();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (int t = 0; t < k; ++t) {
    bool ok0 = false;
    for (int r = 0; r < n; ++r) {
      const auto& h = handles[static_cast<size_t>(r)][static_cast<size_t>(t)];
      HVD_FUZZ_CHECK(h->wait_until(deadline));  // every tensor completes on every rank
      if (r == 0) ok0 = h->status().ok();
      HVD_FUZZ_CHECK(h->status().ok() == ok0);  // and fails on all ranks or on none
    }
  }
  sets.shutdown();
  clear_fatal();  // the sets' stop, if a corrupted message made one, ends with them
  return 0;
}
