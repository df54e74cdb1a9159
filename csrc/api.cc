// Copyright horovod_cpp authors. The public API: argument checks, then the Runtime.
//
// The single process-wide pointer to the Runtime lives here, at the API boundary, guarded by
// a mutex; every call takes a shared reference so shutdown() cannot free it under a caller.
//
// A check on one tensor that fails here (a bad argument, an unusable device) throws at once
// on the calling rank, and the tensor is still submitted, carrying the reason
// (Request::error): the coordinator fails it on every rank with a message naming this rank
// and the reason, so the ranks whose own checks passed get an error instead of waiting
// forever. Only failures that leave nothing to submit to (no runtime, no such process set,
// inconsistent argument lists) fail on the calling rank alone.
#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "common/block_pool.h"
#include "common/fatal.h"
#include "common/logging.h"
#include "common/name_index.h"
#include "core/handle_state.h"
#include "core/runtime.h"
#include "core/timeline.h"
#include "horovod_cpp/api.h"
#include "horovod_cpp_build_config.h"

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

std::string describe(const Request& q) {
  return std::string(op_type_name(q.op)) + " '" + q.name + "'";
}

// The conditions of the argument checks, each written once: the checks below throw naming
// the tensor when one holds, and plain_cpu_allreduce() sends a call for which none holds
// straight to the set's table.
bool negative_dimension(const Shape& shape) {
  return std::any_of(shape.begin(), shape.end(), [](int64_t d) { return d < 0; });
}
bool data_missing(const void* data, const Shape& shape) {
  return data == nullptr && num_elements(shape) > 0;
}
bool average_undefined(DataType dtype, ReduceOp op) {
  return dtype == DataType::kBool && op == ReduceOp::kAverage;
}
// Integer tensors are scaled in double and truncated (Horovod's rule) on the CPU; the GPU
// kernels scale floating types only.
bool scaling_unsupported(DataType dtype, const Device& device, double pre, double post) {
  return (pre != 1.0 || post != 1.0) && !is_floating_point(dtype) &&
         (dtype == DataType::kBool || device.is_cuda());
}
// An out-of-place output must be the input's dtype, shape (`in_shape`) and device.
bool output_mismatch(const TensorView& in, const Shape& in_shape, const TensorView& out) {
  return out.dtype != in.dtype || out.shape != in_shape || out.device != in.device;
}

// One submission being built: the runtime, the target set and its entries.
class Submission {
 public:
  Submission(const char* what, ProcessSet set) : rt_(runtime_or_throw(what)) {
    // The global set lives as long as the runtime (held by rt_): no reference to count.
    set_ = set.id == 0 ? rt_->global_set() : nullptr;
    if (!set_) {
      Status s = rt_->find_set(set.id, &held_set_);
      if (!s.ok()) throw InvalidArgumentError(std::string(what) + ": " + s.message());
      set_ = held_set_.get();
    }
    entries_.swap(spare_entries());
  }
  ~Submission() {
    if (names_used_) spare_names().clear();
    // Gives the vector's room back for this thread's next call (small ones only: a large
    // group's room is not worth keeping).
    entries_.clear();
    if (entries_.capacity() <= kSpareEntries) entries_.swap(spare_entries());
  }
  Submission(const Submission&) = delete;
  Submission& operator=(const Submission&) = delete;
  Runtime& rt() { return *rt_; }
  ProcessSetState& set() { return *set_; }

  /// Adds a tensor worked on in place (or only read); returns its request for the caller to
  /// complete.
  Request& add(OpType op, const std::string& name, const TensorView& t) {
    return add_entry(op, name, TensorView(t), nullptr).request;
  }
  /// add() for a view the caller gives up, and an output view (null: in place). Each Shape copy
  /// is a heap allocation, and a tiny tensor's submission is dominated by allocations
  /// (docs/benchmarks.md, workload d): the input's shape moves into the request, and the
  /// entry's views keep no shape (BatchTensor: sizes come from the agreed response).
  TensorEntry& add_entry(OpType op, const std::string& name, TensorView&& in, TensorView* out) {
    const size_t index = entries_.size();
    // Only the first of two tensors of one name can be submitted (names are unique per set).
    const bool duplicate = !name.empty() && !unique_name(name);
    TensorEntry& e = (duplicate ? dropped_ : entries_).emplace_back();  // built in place
    e.request.rank = set_->rank();
    e.request.op = op;
    // Unnamed calls are numbered in submit(), every call, rejected or not: a call rejected on
    // one rank is still sent (marked failed) and pairs with the other ranks' same call.
    e.request.name = name.empty() ? std::string(op_type_name(op)) + ".noname" : name;
    if (name.empty()) unnamed_.push_back(index);
    e.request.dtype = in.dtype;
    e.request.shape = std::move(in.shape);
    e.request.device = in.device;
    e.input = std::move(in);
    in.shape.clear();  // moved-from: now certainly empty, so the view copies allocate nothing
    if (out) {
      e.output = std::move(*out);  // its shape stays for the caller's check, then goes
    } else {
      e.output = e.input;
    }
    e.part = static_cast<int>(index);
    if (duplicate) {
      note_error(describe(e.request) + ": the name appears twice in the group");
      return e;
    }
    const TensorView& input = entries_.back().input;
    check([&] { check_input(entries_.back().request, input); });
    if (input.device.is_cuda()) {
      // The transport that takes CUDA tensors says whether this one is usable (NCCL: it must
      // be on this rank's GPU, docs/gpu.md). Ranks negotiate "a CUDA tensor" without the
      // ordinal: each uses its own device. A failed device check goes through the negotiation
      // like every local error.
      Request& q = entries_.back().request;
      Status dev = set_->transports().check_device(input.device, describe(q));
      if (!dev.ok()) note_error(dev.message());
      q.device = Device{Device::Kind::kCUDA, -1};
    }
    return entries_.back();
  }

  /// Runs a check that throws InvalidArgumentError; a failure is kept (the first one wins)
  /// and reported by submit() on every rank.
  template <typename Fn>
  void check(Fn&& fn) {
    try {
      fn();
    } catch (const InvalidArgumentError& e) {
      note_error(e.what());
    }
  }
  /// Records a local failure: submit() sends the entries as failed and throws it.
  void note_error(const std::string& why) {
    if (error_.empty()) error_ = why;
  }

  /// Marks the entries as one group (negotiated and run as a unit).
  void group() { grouped_ = true; }

  Handle submit(const std::string& handle_name) {
    for (size_t i : unnamed_) entries_[i].request.name = set_->auto_name(entries_[i].request.op);
    if (grouped_) {
      // A key that every rank derives alike from the op, the group's size and the members'
      // names (FNV-1a over them), so requests stay small however large the group: 15
      // characters, which std::string holds without an allocation (every member carries a
      // copy, and a thousand-member group's longer keys cost a malloc per member per step).
      uint64_t h = 1469598103934665603ull;
      const auto mix = [&h](unsigned char c) { h = (h ^ c) * 1099511628211ull; };
      mix(static_cast<unsigned char>(entries_.front().request.op));
      for (size_t n = entries_.size(); n > 0; n >>= 8) mix(static_cast<unsigned char>(n & 0xff));
      for (const auto& e : entries_) {
        for (unsigned char c : e.request.name) mix(c);
        mix(0);  // the terminating zero byte
      }
      static const char kHex[] = "0123456789abcdef";
      std::string key = "g";  // then the hash's low 56 bits in hex
      for (int shift = 52; shift >= 0; shift -= 4) key += kHex[(h >> shift) & 0xf];
      for (auto& e : entries_) {
        e.request.group = key;
        e.request.group_size = static_cast<int32_t>(entries_.size());
      }
    }
    if (!error_.empty()) {
      // Sent anyway, marked failed: every other rank's matching call fails naming this rank
      // and the reason, instead of waiting for a tensor this rank will never send. The handle
      // behind them is this call's own, which nobody waits on.
      auto failed = std::make_shared<detail::HandleState>(entries_.front().request.name,
                                                          static_cast<int>(entries_.size()));
      for (auto& e : entries_) {
        e.request.error = error_;
        e.handle = failed;
        e.input = e.output = TensorView(nullptr, e.input.dtype, {}, e.input.device);
      }
      Status sent = set_->enqueue(std::move(entries_));
      if (!sent.ok()) {
        HVD_LOG(kDebug) << "a locally failed submission was not sent: " << sent.message();
      }
      throw InvalidArgumentError(error_);
    }
    auto state = make_pooled<detail::HandleState>(
        unnamed_.empty() ? handle_name : entries_.front().request.name,
        static_cast<int>(entries_.size()));
    state->set_driver(set_->as_driver());  // an untimed wait runs the set's cycles itself
    const int64_t now = rt_->timeline()->enabled() ? now_us() : 0;
    for (auto& e : entries_) {
      e.handle = state;
      e.enqueue_us = now;
    }
    throw_if_error(set_->enqueue(std::move(entries_)));
    state_ = state.get();
    return Handle(std::move(state));  // moved, not copied: each reference count is an atomic
  }
  /// The state behind the last submit() (for results the public Handle does not expose),
  /// valid while that Handle lives.
  detail::HandleState* state() const { return state_; }
  Handle submit() { return submit(entries_.front().request.name); }

 private:
  /// False if `name` was already added to this submission. The index of names is filled
  /// only when a second tensor is added: single-tensor calls (the common case) touch nothing.
  bool unique_name(const std::string& name) {
    if (entries_.empty()) return true;
    NameIndex& names = spare_names();
    if (!names_used_) {
      names_used_ = true;
      for (size_t i = 0; i < entries_.size(); ++i) {
        if (std::find(unnamed_.begin(), unnamed_.end(), i) == unnamed_.end()) {
          names.insert(entries_[i].request.name, 0);
        }
      }
    }
    return names.insert(name, 0);
  }

  // The input view `t`, whose shape is now the request's.
  static void check_input(const Request& q, const TensorView& t) {
    const char* role = "input";
    if (negative_dimension(q.shape)) {
      throw InvalidArgumentError(describe(q) + ": " + role + " has a negative dimension " +
                                 shape_str(q.shape));
    }
    if (data_missing(t.data, q.shape)) {
      throw InvalidArgumentError(describe(q) + ": " + role + " data pointer is null");
    }
    if (t.device.is_cuda() && !nccl_built()) {  // NCCL builds: checked in add()
      throw InvalidArgumentError(
          describe(q) + ": " + role + " is on " + t.device.str() +
          (cuda_built() ? "; CUDA tensors need a build of horovod_cpp with NCCL"
                        : " but this build of horovod_cpp has no CUDA support"));
    }
  }

  std::shared_ptr<Runtime> rt_;
  ProcessSetState* set_ = nullptr;
  std::shared_ptr<ProcessSetState> held_set_;  // a set other than the global one
  std::vector<TensorEntry> entries_;
  std::vector<TensorEntry> dropped_;       // a name's second occurrence, never submitted
  std::string error_;                      // the first local failure; empty if none
  bool names_used_ = false;                // spare_names() holds this submission's names
  std::vector<size_t> unnamed_;            // entries to number at submit()
  bool grouped_ = false;
  detail::HandleState* state_ = nullptr;

  /// A vector of entries per thread, lent to each submission in turn: a call that submits
  /// one tiny tensor would otherwise spend a good part of its time allocating and freeing it.
  static constexpr size_t kSpareEntries = 16;
  static std::vector<TensorEntry>& spare_entries() {
    thread_local std::vector<TensorEntry> spare;
    return spare;
  }
  /// Likewise an index of names per thread, for duplicates within a group (emptied after
  /// each submission that used it, keeping its room and its strings').
  static NameIndex& spare_names() {
    thread_local NameIndex names;
    return names;
  }
};

void set_reduction(Request& q, ReduceOp op, double pre, double post) {
  q.reduce_op = op;
  q.prescale = pre;
  q.postscale = post;
  if (average_undefined(q.dtype, op)) {
    throw InvalidArgumentError(describe(q) + ": op average is not defined for bool tensors");
  }
  if (scaling_unsupported(q.dtype, q.device, pre, post)) {
    throw InvalidArgumentError(describe(q) + ": prescale_factor/postscale_factor need a "
                               "floating-point tensor" +
                               (q.dtype == DataType::kBool ? "" : " on a CUDA device") + ", not " +
                               dtype_name(q.dtype));
  }
}

// A grouped call's lists must pair up and be non-empty.
void check_group(const char* what, size_t names, size_t tensors) {
  if (names != tensors || tensors == 0) {
    throw InvalidArgumentError(std::string(what) + ": " + std::to_string(names) + " names for " +
                               std::to_string(tensors) + " tensors");
  }
}

void check_not_scalar(const Request& q) {
  if (q.shape.empty()) {
    throw InvalidArgumentError(describe(q) + ": needs at least one dimension (got a scalar; "
                               "give it shape [1])");
  }
}

void check_reducescatter(Request& q, const ReducescatterOptions& o) {
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
// True when every check submit_allreduce() makes on this rank passes for a CPU tensor of the
// global set: then nothing can fail locally, and the tensor goes straight into the set's
// table (ProcessSetState::enqueue_one). Anything else takes the general path, whose checks
// report the failure (on every rank) exactly as before.
bool plain_cpu_allreduce(const TensorView& in, const TensorView* out, const AllreduceOptions& o) {
  return o.process_set.id == 0 && !in.device.is_cuda() && !negative_dimension(in.shape) &&
         !data_missing(in.data, in.shape) &&
         (!out || (!data_missing(out->data, out->shape) && !output_mismatch(in, in.shape, *out))) &&
         !average_undefined(in.dtype, o.op) &&
         !scaling_unsupported(in.dtype, in.device, o.prescale_factor, o.postscale_factor);
}

// Both public overloads end here, giving up their by-value views (no further Shape copies).
Handle submit_allreduce(const std::string& name, TensorView&& input, TensorView* output,
                        const AllreduceOptions& options) {
  std::shared_ptr<Runtime> rt;
  if (plain_cpu_allreduce(input, output, options) &&
      (rt = runtime_or_throw("allreduce"))->global_set()) {
    // A training step's gradients: no Submission, no TensorEntry, no moves of either.
    ProcessSetState& set = *rt->global_set();
    std::string numbered;
    if (name.empty()) numbered = set.auto_name(OpType::kAllreduce);
    const std::string& tensor_name = name.empty() ? numbered : name;
    if (output) output->shape.clear();  // checked; the entry's views keep no shape
    auto state = make_pooled<detail::HandleState>(tensor_name, 1);
    state->set_driver(set.as_driver());  // an untimed wait runs the set's cycles itself
    throw_if_error(set.enqueue_one(ProcessSetState::Single(
        OpType::kAllreduce, &tensor_name, &input, output, options.op, options.prescale_factor,
        options.postscale_factor, 0, state, rt->timeline()->enabled() ? now_us() : 0)));
    return Handle(std::move(state));
  }
  Submission sub("allreduce", options.process_set);
  TensorEntry& e = sub.add_entry(OpType::kAllreduce, name, std::move(input), output);
  Request& q = e.request;
  sub.check([&] {
    if (output) {
      const TensorView& in = e.input;
      TensorView& out = e.output;
      if (data_missing(out.data, out.shape)) {
        throw InvalidArgumentError(describe(q) + ": output data pointer is null");
      }
      if (output_mismatch(in, q.shape, out)) {
        throw InvalidArgumentError(describe(q) + ": output " + dtype_name(out.dtype) +
                                   shape_str(out.shape) + " does not match input " +
                                   dtype_name(in.dtype) + shape_str(q.shape));
      }
      out.shape.clear();  // checked; the entry's views keep no shape
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
  Submission sub("grouped_allreduce", options.process_set);
  check_group("grouped_allreduce", names.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    Request& q = sub.add(OpType::kAllreduce, names[i], tensors[i]);
    sub.check(
        [&] { set_reduction(q, options.op, options.prescale_factor, options.postscale_factor); });
  }
  sub.group();
  return sub.submit("group of " + std::to_string(tensors.size()) + " starting '" +
                    (names[0].empty() ? std::string("noname") : names[0]) + "'");
}

void grouped_allreduce(const std::vector<std::string>& names, const std::vector<TensorView>& tensors,
                       const AllreduceOptions& options) {
  grouped_allreduce_async(names, tensors, options).wait();
}

// ---- allgather, broadcast, alltoall, reducescatter ------------------------------------------

Handle allgather_async(const std::string& name, TensorView input, ProcessSet set) {
  Submission sub("allgather", set);
  Request& q = sub.add(OpType::kAllgather, name, input);
  sub.check([&] { check_not_scalar(q); });
  return sub.submit();
}

Tensor allgather(const std::string& name, TensorView input, ProcessSet set) {
  return allgather_async(name, input, set).result();
}

Handle grouped_allgather_async(const std::vector<std::string>& names,
                               const std::vector<TensorView>& inputs, ProcessSet set) {
  Submission sub("grouped_allgather", set);
  check_group("grouped_allgather", names.size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    Request& q = sub.add(OpType::kAllgather, names[i], inputs[i]);
    sub.check([&] { check_not_scalar(q); });
  }
  sub.group();
  return sub.submit("allgather group of " + std::to_string(inputs.size()));
}

Handle broadcast_async(const std::string& name, TensorView tensor, int root_rank, ProcessSet set) {
  Submission sub("broadcast", set);
  Request& q = sub.add(OpType::kBroadcast, name, tensor);
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
void check_alltoall(Request& q, const TensorView& input, const std::vector<int64_t>& splits,
                    int64_t n) {
  check_not_scalar(q);
  const int64_t dim0 = input.shape[0];
  if (splits.empty()) {
    if (dim0 % n != 0) {
      throw InvalidArgumentError(describe(q) + ": dimension 0 (" + std::to_string(dim0) +
                                 ") is not divisible by the number of ranks (" + std::to_string(n) +
                                 "); pass splits");
    }
    q.splits.assign(static_cast<size_t>(n), dim0 / n);
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
    q.splits = splits;
  }
}
}  // namespace

Handle alltoall_async(const std::string& name, TensorView input, const std::vector<int64_t>& splits,
                      ProcessSet set) {
  Submission sub("alltoall", set);
  Request& q = sub.add(OpType::kAlltoall, name, input);
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
  Submission sub("reducescatter", options.process_set);
  Request& q = sub.add(OpType::kReducescatter, name, input);
  sub.check([&] { check_reducescatter(q, options); });
  return sub.submit();
}

Tensor reducescatter(const std::string& name, TensorView input, const ReducescatterOptions& options) {
  return reducescatter_async(name, input, options).result();
}

Handle grouped_reducescatter_async(const std::vector<std::string>& names,
                                   const std::vector<TensorView>& inputs,
                                   const ReducescatterOptions& options) {
  Submission sub("grouped_reducescatter", options.process_set);
  check_group("grouped_reducescatter", names.size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    Request& q = sub.add(OpType::kReducescatter, names[i], inputs[i]);
    sub.check([&] { check_reducescatter(q, options); });
  }
  sub.group();
  return sub.submit("reducescatter group of " + std::to_string(inputs.size()));
}

// ---- join, barrier, timeline --------------------------------------------------------------

int join() {
  Submission sub("join", ProcessSet{});
  sub.add(OpType::kJoin, kJoinName, TensorView(nullptr, DataType::kUInt8, {0}));
  const Handle h = sub.submit("join");
  h.wait();
  return static_cast<int>(sub.state()->value());  // the last rank to join (h keeps it)
}

void barrier(ProcessSet set) {
  Submission sub("barrier", set);
  sub.add(OpType::kBarrier, "horovod_cpp.barrier", TensorView(nullptr, DataType::kUInt8, {0}));
  sub.submit("barrier").wait();
}

void start_timeline(const std::string& path, bool mark_cycles) {
  throw_if_error(runtime_or_throw("start_timeline()")->timeline()->start(path, mark_cycles));
}

void stop_timeline() { runtime_or_throw("stop_timeline()")->timeline()->stop(); }

bool mpi_built() { return true; }
bool nccl_built() { return HOROVOD_CPP_HAVE_NCCL != 0; }
bool cuda_built() { return HOROVOD_CPP_HAVE_CUDA != 0; }

}  // namespace hvd
