// Copyright horovod_cpp authors. What the tests of the background loop share
// (test_loop.cc, test_loop_submit.cc): submitting tensors to in-process sets, bounded waits,
// and element-by-element checks.
#pragma once

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/handle_state.h"
#include "in_process_data_plane.h"

namespace hvd {
namespace testing {

constexpr auto kDeadline = std::chrono::seconds(30);

inline Config test_config() {
  Config c;
  c.cycle_time_ms = 0.5;
  c.stall_check_seconds = 60;
  return c;
}

// One submitted tensor: the entry's request and memory, and its handle.
struct Op {
  std::vector<float> data;
  std::shared_ptr<detail::HandleState> handle;
};

// A tensor to submit, owning what a TensorSubmit points to (as the API's Submission does):
// its request's fields, its view (in place) and its handle.
struct Entry {
  Request request;
  TensorView input;
  std::shared_ptr<detail::HandleState> handle;
};

inline Entry entry(int rank, OpType op, const std::string& name, void* data, DataType dtype,
                   Shape shape, const std::shared_ptr<detail::HandleState>& handle) {
  Entry e;
  e.request.rank = rank;
  e.request.op = op;
  e.request.name = name;
  e.request.dtype = dtype;
  e.input = TensorView(data, dtype, shape);
  e.handle = handle;
  return e;
}

// Submits `es` as one submission (a group if they carry a group key), all completing the
// first one's handle: ProcessSetState::enqueue()'s status.
inline Status enqueue(ProcessSetState& set, std::vector<Entry>& es) {
  std::vector<TensorSubmit> ts;
  for (Entry& e : es) {
    TensorSubmit& t = ts.emplace_back(e.request.op, &e.request.name, &e.input, nullptr);
    t.reduce_op = e.request.reduce_op;
    t.root = e.request.root;
    if (!e.request.splits.empty()) t.splits = &e.request.splits;
  }
  SubmitCommon c;
  c.handle = es.front().handle;
  if (!es.front().request.group.empty()) c.group = &es.front().request.group;
  return set.enqueue(ts.data(), ts.size(), c);
}

// Submits one tensor on `set`; throws if the submission is refused.
inline std::shared_ptr<detail::HandleState> submit(ProcessSetState& set, Entry e) {
  auto h = e.handle ? e.handle : std::make_shared<detail::HandleState>(e.request.name, 1);
  e.handle = h;
  std::vector<Entry> v;
  v.push_back(std::move(e));
  throw_if_error(enqueue(set, v));
  return h;
}

// Submits one float tensor of `len` elements as the API submits a plain CPU allreduce (one
// TensorSubmit, the caller's views by pointer); out-of-place into `out` if given. Throws if
// refused.
inline std::shared_ptr<detail::HandleState> submit_one(ProcessSetState& set,
                                                       const std::string& name, float* data,
                                                       int64_t len, float* out = nullptr,
                                                       ReduceOp op = ReduceOp::kSum) {
  TensorView in(data, DataType::kFloat32, {len});
  TensorView output(out, DataType::kFloat32, {});  // the API drops a checked output's shape
  TensorSubmit t(OpType::kAllreduce, &name, &in, out ? &output : nullptr);
  t.reduce_op = op;
  auto h = std::make_shared<detail::HandleState>(name, 1);
  SubmitCommon c;
  c.handle = h;
  throw_if_error(set.enqueue(&t, 1, c));
  return h;
}

// Waits (bounded) and returns the handle's status.
inline Status finish(const std::shared_ptr<detail::HandleState>& h) {
  if (!h->wait_until(std::chrono::steady_clock::now() + kDeadline)) {
    return Status::Backend("'" + h->name() + "' did not complete within 30 s");
  }
  return h->status();
}

inline void require_ok(const std::shared_ptr<detail::HandleState>& h) {
  throw_if_error(finish(h));
}

// After a refused resubmission of the pending "x": both ranks' "x" (1s on rank 0, 2s on rank 1)
// completed with their sum, and the refused tensor `refused` (9s) was never run.
inline void require_pending_ran_refused_not(const std::shared_ptr<detail::HandleState>& h0,
                                            const std::shared_ptr<detail::HandleState>& h1,
                                            const std::vector<float>& a0,
                                            const std::vector<float>& a1,
                                            const std::vector<float>& refused) {
  require_ok(h0);
  require_ok(h1);
  CHECK(a0[3] == 3.0f);
  CHECK(a1[0] == 3.0f);
  CHECK(refused[0] == 9.0f);
}

inline float value(int rank, int tensor, int i) {
  return static_cast<float>(rank * 1000 + tensor * 10 + i % 7);
}

// Checks every element of `got` against `expect(i)`; throws naming the first difference.
template <typename T, typename F>
inline void check_all(const std::string& what, const T* got, int64_t n, F expect) {
  for (int64_t i = 0; i < n; ++i) {
    if (got[i] != expect(i)) {
      throw std::runtime_error(what + ": element " + std::to_string(i) + " is " +
                               std::to_string(got[i]) + ", expected " + std::to_string(expect(i)));
    }
  }
}

}  // namespace testing
}  // namespace hvd
