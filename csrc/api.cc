// Copyright horovod_cpp authors. The public API: argument checks, then the Runtime.
//
// The single process-wide pointer to the Runtime lives here, at the API boundary, guarded by
// a mutex; every call takes a shared reference so shutdown() cannot free it under a caller.
//
// Each call parses its arguments and submits through a Submission (core/submission.h), the
// one route into a process set's table for every collective. A check on one tensor that
// fails (a bad argument, an unusable device) throws at once on the calling rank, and the
// tensor is still submitted, carrying the reason (Request::error): the coordinator fails it
// on every rank with a message naming this rank and the reason, so the ranks whose own
// checks passed get an error instead of waiting forever. Only failures that leave nothing to
// submit to (no runtime, no such process set, inconsistent argument lists) fail on the
// calling rank alone.
#include "horovod_cpp/api.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "common/exit_hook.h"
#include "common/fatal.h"
#include "core/handle_state.h"
#include "core/runtime.h"
#include "core/submission.h"
#include "core/timeline.h"
#include "horovod_cpp/elastic.h"
#include "horovod_cpp_build_config.h"
#if HOROVOD_CPP_HAVE_GLOO
#include "transport/factory/gloo_world.h"
#endif

namespace hvd {
namespace {

std::mutex g_mu;
std::shared_ptr<Runtime> g_runtime;  // guarded by g_mu
bool g_atexit_registered = false;    // guarded by g_mu

std::shared_ptr<Runtime> runtime_or_throw(const char* what) {
  std::shared_ptr<Runtime> rt;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    rt = g_runtime;
  }
  if (!rt) {
    throw NotInitializedError(std::string("horovod_cpp: ") + what +
                              " called before hvd::init() or after hvd::shutdown()");
  }
  return rt;
}

// The submission of a call on `set` (throws if there is no runtime or no such set).
Submission submission(const char* what, ProcessSet set) {
  return Submission(what, runtime_or_throw(what), set.id);
}

// A grouped call's lists must pair up and be non-empty.
void check_group(const char* what, size_t names, size_t tensors) {
  if (names != tensors || tensors == 0) {
    throw InvalidArgumentError(std::string(what) + ": " + std::to_string(names) + " names for " +
                               std::to_string(tensors) + " tensors");
  }
}

// Adds a grouped call's members (checked pairwise with their names), each checked by
// `check(member)` (a failure is kept for submit()).
template <typename Check>
void add_group(Submission& sub, const char* what, OpType op, const std::vector<std::string>& names,
               const std::vector<TensorView>& tensors, Check check) {
  check_group(what, names.size(), tensors.size());
  sub.begin_group(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    TensorSubmit& q = sub.add_member(op, names[i], tensors[i]);
    sub.check([&] { check(q); });
  }
}

void check_reducescatter(TensorSubmit& q, const ReducescatterOptions& o) {
  check_not_scalar(q);
  if (o.op != ReduceOp::kSum && o.op != ReduceOp::kAverage) {
    throw InvalidArgumentError(describe(q) + ": reducescatter supports sum and average, not " +
                               reduce_op_name(o.op));
  }
  set_reduction(q, o.op, o.prescale_factor, o.postscale_factor);
}

// Registered after MPI's finalizer, so it runs first: a job stopped by a fatal condition
// ends here (MPI_Abort) instead of waiting in MPI_Finalize for a rank that is stuck.
void shutdown_at_exit() {
  try {
    shutdown();
  } catch (...) {
  }
  abort_if_fatal("at exit");
}

// Run from inside MPI_Finalize when the program finalizes MPI before hvd::shutdown()
// (common/exit_hook.h).
void shutdown_in_mpi_finalize() {
  try {
    shutdown();
  } catch (...) {
  }
  abort_if_fatal("in MPI_Finalize");
}

}  // namespace

void init(const InitOptions& options) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_runtime) {
    if (g_runtime->running()) throw InvalidArgumentError("hvd::init(): already initialized");
    g_runtime.reset();  // stopped by another rank's shutdown or a stall: start afresh
  }
  std::unique_ptr<Runtime> rt;
  throw_if_error(Runtime::create(options, &rt));
  // Every rank took part in the creation: the job is whole again after a fatal condition.
  clear_fatal();
  g_runtime = std::move(rt);
  if (!g_atexit_registered) {
    g_atexit_registered = true;
    std::atexit(shutdown_at_exit);
    set_library_shutdown(shutdown_in_mpi_finalize);
  }
}

void shutdown() {
  std::shared_ptr<Runtime> rt;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    rt.swap(g_runtime);
  }
  if (rt) rt->shutdown();
  // The last reference (possibly held by a caller still inside an API call) frees MPI
  // communicators when it goes.
}

bool is_initialized() {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_runtime && g_runtime->running();
}

int rank() { return runtime_or_throw("rank()")->world().rank(); }
int size() { return runtime_or_throw("size()")->world().size(); }
int local_rank() { return runtime_or_throw("local_rank()")->world().local_rank(); }
int local_size() { return runtime_or_throw("local_size()")->world().local_size(); }
int cross_rank() { return runtime_or_throw("cross_rank()")->world().cross_rank(); }
int cross_size() { return runtime_or_throw("cross_size()")->world().cross_size(); }

// ---- elastic primitives (horovod_cpp/elastic.h) ----------------------------------------

bool elastic::hosts_updated() {
  bool updated = false;
  throw_if_error(runtime_or_throw("elastic::hosts_updated()")->elastic_hosts_updated(&updated));
  return updated;
}

int64_t elastic::generation() {
  return runtime_or_throw("elastic::generation()")->world().elastic_generation();
}

// ---- process sets ----------------------------------------------------------------------

ProcessSet add_process_set(const std::vector<int>& ranks) {
  auto rt = runtime_or_throw("add_process_set()");
  ProcessSet ps;
  throw_if_error(rt->add_process_set(ranks, &ps.id));
  return ps;
}

void remove_process_set(ProcessSet set) {
  throw_if_error(runtime_or_throw("remove_process_set()")->remove_process_set(set.id));
}

std::vector<int> process_set_ranks(ProcessSet set) {
  auto ranks = runtime_or_throw("process_set_ranks()")->process_set_ranks(set.id);
  if (ranks.empty()) throw InvalidArgumentError("process set " + std::to_string(set.id) + " does not exist");
  return ranks;
}

int process_set_rank(ProcessSet set) {
  auto ranks = process_set_ranks(set);
  const int me = rank();
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] == me) return static_cast<int>(i);
  }
  return -1;
}

int process_set_size(ProcessSet set) { return static_cast<int>(process_set_ranks(set).size()); }

// ---- allreduce ---------------------------------------------------------------------------

namespace {
// Both public overloads end here, giving up their by-value views (no further Shape copies).
Handle submit_allreduce(const std::string& name, TensorView&& input, TensorView* output,
                        const AllreduceOptions& options) {
  Submission sub("allreduce", runtime_or_throw("allreduce"), options.process_set.id);
  TensorSubmit q(OpType::kAllreduce, &name, &input, output);
  sub.add(q);
  sub.check([&] {
    if (output) {
      const TensorView& in = input;
      TensorView& out = *output;
      if (data_missing(out.data, out.shape)) {
        throw InvalidArgumentError(describe(q) + ": output data pointer is null");
      }
      // An out-of-place output must be the input's dtype, shape and device.
      if (out.dtype != in.dtype || out.shape != in.shape || out.device != in.device) {
        throw InvalidArgumentError(describe(q) + ": output " + dtype_name(out.dtype) +
                                   shape_str(out.shape) + " does not match input " +
                                   dtype_name(in.dtype) + shape_str(in.shape));
      }
      out.shape.clear();  // checked; the place's views keep no shape
    }
    set_reduction(q, options.op, options.prescale_factor, options.postscale_factor);
  });
  return sub.submit();
}
}  // namespace

Handle allreduce_async(const std::string& name, TensorView input, TensorView output,
                       const AllreduceOptions& options) {
  return submit_allreduce(name, std::move(input), &output, options);
}

Handle allreduce_async(const std::string& name, TensorView tensor, const AllreduceOptions& options) {
  return submit_allreduce(name, std::move(tensor), nullptr, options);
}

void allreduce(const std::string& name, TensorView tensor, const AllreduceOptions& options) {
  allreduce_async(name, std::move(tensor), options).wait();
}

void allreduce(const std::string& name, TensorView input, TensorView output,
               const AllreduceOptions& options) {
  allreduce_async(name, std::move(input), std::move(output), options).wait();
}

Handle grouped_allreduce_async(const std::vector<std::string>& names,
                               const std::vector<TensorView>& tensors,
                               const AllreduceOptions& options) {
  Submission sub = submission("grouped_allreduce", options.process_set);
  add_group(sub, "grouped_allreduce", OpType::kAllreduce, names, tensors, [&](TensorSubmit& q) {
    set_reduction(q, options.op, options.prescale_factor, options.postscale_factor);
  });
  return sub.submit("group of " + std::to_string(tensors.size()) + " starting '" +
                    (names[0].empty() ? std::string("noname") : names[0]) + "'");
}

void grouped_allreduce(const std::vector<std::string>& names, const std::vector<TensorView>& tensors,
                       const AllreduceOptions& options) {
  grouped_allreduce_async(names, tensors, options).wait();
}

// ---- allgather, broadcast, alltoall, reducescatter ------------------------------------------

Handle allgather_async(const std::string& name, TensorView input, ProcessSet set) {
  Submission sub = submission("allgather", set);
  TensorSubmit q(OpType::kAllgather, &name, &input, nullptr);
  sub.add(q);
  sub.check([&] { check_not_scalar(q); });
  return sub.submit();
}

Tensor allgather(const std::string& name, TensorView input, ProcessSet set) {
  return allgather_async(name, input, set).result();
}

Handle grouped_allgather_async(const std::vector<std::string>& names,
                               const std::vector<TensorView>& inputs, ProcessSet set) {
  Submission sub = submission("grouped_allgather", set);
  add_group(sub, "grouped_allgather", OpType::kAllgather, names, inputs,
            [](TensorSubmit& q) { check_not_scalar(q); });
  return sub.submit("allgather group of " + std::to_string(inputs.size()));
}

Handle broadcast_async(const std::string& name, TensorView tensor, int root_rank, ProcessSet set) {
  Submission sub = submission("broadcast", set);
  TensorSubmit q(OpType::kBroadcast, &name, &tensor, nullptr);
  sub.add(q);
  q.root = root_rank;
  const auto& members = sub.set().ranks();
  if (std::find(members.begin(), members.end(), root_rank) == members.end()) {
    sub.note_error(describe(q) + ": root rank " + std::to_string(root_rank) +
                   " is not a rank of process set " + std::to_string(set.id) + " (ranks 0.." +
                   std::to_string(sub.rt().world().size() - 1) + ")");
  }
  return sub.submit();
}

void broadcast(const std::string& name, TensorView tensor, int root_rank, ProcessSet set) {
  broadcast_async(name, tensor, root_rank, set).wait();
}

namespace {
void check_alltoall(TensorSubmit& q, const TensorView& input, const std::vector<int64_t>& splits,
                    int64_t n) {
  check_not_scalar(q);
  const int64_t dim0 = input.shape[0];
  if (splits.empty()) {
    if (dim0 % n != 0) {
      throw InvalidArgumentError(describe(q) + ": dimension 0 (" + std::to_string(dim0) +
                                 ") is not divisible by the number of ranks (" + std::to_string(n) +
                                 "); pass splits");
    }
    q.splits->assign(static_cast<size_t>(n), dim0 / n);
  } else {
    if (static_cast<int64_t>(splits.size()) != n) {
      throw InvalidArgumentError(describe(q) + ": " + std::to_string(splits.size()) +
                                 " splits for " + std::to_string(n) + " ranks");
    }
    int64_t sum = 0;
    bool overflow = false;  // a wrapped sum could pass the check below
    for (int64_t v : splits) {
      if (v < 0) throw InvalidArgumentError(describe(q) + ": negative split " + std::to_string(v));
      overflow = overflow || __builtin_add_overflow(sum, v, &sum);
    }
    if (overflow) {
      throw InvalidArgumentError(describe(q) + ": splits sum past 2^63-1, past dimension 0 (" +
                                 std::to_string(dim0) + ")");
    }
    if (sum > dim0) {
      throw InvalidArgumentError(describe(q) + ": splits sum to " + std::to_string(sum) +
                                 ", past dimension 0 (" + std::to_string(dim0) + ")");
    }
    *q.splits = splits;
  }
}
}  // namespace

Handle alltoall_async(const std::string& name, TensorView input, const std::vector<int64_t>& splits,
                      ProcessSet set) {
  Submission sub = submission("alltoall", set);
  TensorSubmit q(OpType::kAlltoall, &name, &input, nullptr);
  sub.add(q);
  q.splits = sub.splits();
  sub.check([&] { check_alltoall(q, input, splits, sub.set().size()); });
  return sub.submit();
}

AlltoallResult alltoall(const std::string& name, TensorView input, const std::vector<int64_t>& splits,
                        ProcessSet set) {
  Handle h = alltoall_async(name, input, splits, set);
  AlltoallResult r;
  r.output = h.result();
  r.received_splits = h.received_splits();
  return r;
}

Handle reducescatter_async(const std::string& name, TensorView input,
                           const ReducescatterOptions& options) {
  Submission sub = submission("reducescatter", options.process_set);
  TensorSubmit q(OpType::kReducescatter, &name, &input, nullptr);
  sub.add(q);
  sub.check([&] { check_reducescatter(q, options); });
  return sub.submit();
}

Tensor reducescatter(const std::string& name, TensorView input, const ReducescatterOptions& options) {
  return reducescatter_async(name, input, options).result();
}

Handle grouped_reducescatter_async(const std::vector<std::string>& names,
                                   const std::vector<TensorView>& inputs,
                                   const ReducescatterOptions& options) {
  Submission sub = submission("grouped_reducescatter", options.process_set);
  add_group(sub, "grouped_reducescatter", OpType::kReducescatter, names, inputs,
            [&](TensorSubmit& q) { check_reducescatter(q, options); });
  return sub.submit("reducescatter group of " + std::to_string(inputs.size()));
}

// ---- join, barrier, timeline --------------------------------------------------------------

int join() {
  Submission sub = submission("join", ProcessSet{});
  const std::string name = kJoinName;
  TensorView none(nullptr, DataType::kUInt8, {0});
  TensorSubmit q(OpType::kJoin, &name, &none, nullptr);
  sub.add(q);
  const Handle h = sub.submit("join");
  h.wait();
  return static_cast<int>(sub.state()->value());  // the last rank to join (h keeps it)
}

void barrier(ProcessSet set) {
  Submission sub = submission("barrier", set);
  const std::string name = "horovod_cpp.barrier";
  TensorView none(nullptr, DataType::kUInt8, {0});
  TensorSubmit q(OpType::kBarrier, &name, &none, nullptr);
  sub.add(q);
  sub.submit("barrier").wait();
}

void start_timeline(const std::string& path, bool mark_cycles) {
  throw_if_error(runtime_or_throw("start_timeline()")->timeline()->start(path, mark_cycles));
}

void stop_timeline() { runtime_or_throw("stop_timeline()")->timeline()->stop(); }

bool mpi_built() { return true; }
bool nccl_built() { return HOROVOD_CPP_HAVE_NCCL != 0; }
bool cuda_built() { return HOROVOD_CPP_HAVE_CUDA != 0; }
bool gloo_built() { return HOROVOD_CPP_HAVE_GLOO != 0; }
bool gloo_enabled() {
#if HOROVOD_CPP_HAVE_GLOO
  return gloo_world_active();
#else
  return false;
#endif
}

}  // namespace hvd
