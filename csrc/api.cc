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

std::string describe(const TensorSubmit& t) {
  return std::string(op_type_name(t.op)) + " '" + *t.name + "'";
}

// The conditions of the argument checks, each written once: the checks below throw naming
// the tensor when one holds.
bool negative_dimension(const Shape& shape) {
  return std::any_of(shape.begin(), shape.end(), [](int64_t d) { return d < 0; });
}
bool data_missing(const void* data, const Shape& shape) {
  return data == nullptr && num_elements(shape) > 0;
}
// Integer tensors are scaled in double and truncated (Horovod's rule) on the CPU; the GPU
// kernels scale floating types only.
bool scaling_unsupported(DataType dtype, const Device& device, double pre, double post) {
  return (pre != 1.0 || post != 1.0) && !is_floating_point(dtype) &&
         (dtype == DataType::kBool || device.is_cuda());
}

// One submission being built: the runtime, the target set and its tensors, then submit(),
// the one route into the set's table (ProcessSetState::enqueue) for every call. A call of one
// tensor keeps it in the Submission itself (the caller's views by pointer, nothing per
// thread); a group's members and their copied views live in per-thread lists.
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
  }
  ~Submission() {
    if (room_ == nullptr) return;
    // Empties the per-thread lists for the thread's next group, keeping their room (a large
    // group's views are not worth keeping).
    room_->items.clear();
    room_->views.clear();
    room_->names.clear();
    room_->unnamed.clear();
    if (room_->views.capacity() > kSpareMembers) {
      std::vector<TensorView>().swap(room_->views);
      std::vector<TensorSubmit>().swap(room_->items);
    }
    if (room_->seen_used) room_->seen.clear();
    room_->seen_used = false;
  }
  Submission(const Submission&) = delete;
  Submission& operator=(const Submission&) = delete;
  Runtime& rt() { return *rt_; }
  ProcessSetState& set() { return *set_; }

  /// Adds the tensor of a one-tensor call: `in`, which the caller gives up (its shape becomes
  /// the request's: each Shape copy would be a heap allocation, and a tiny tensor's
  /// submission is dominated by them), and `out` (null: in place), whose shape the caller
  /// drops once checked (the place's views keep no shape; BatchTensor sizes come from the
  /// agreed response). Returns it for the caller to complete and check.
  TensorSubmit& add(OpType op, const std::string& name, TensorView* in, TensorView* out) {
    one_ = TensorSubmit(op, name_for(op, name, &one_name_, 0), in, out);
    items_ = &one_;
    n_ = 1;
    checked(one_);
    return one_;
  }

  /// Makes room for a group of `n` members (before any add_member()).
  void begin_group(size_t n) {
    room_ = &group_room();
    room_->items.reserve(n);  // the members point into these: no reallocation after this
    room_->views.reserve(n);
    room_->names.reserve(n);
    grouped_ = true;
  }
  /// Adds a member of a group: a copy of `t`. Only the first of two members of one name is
  /// submitted (names are unique per set); a second one is checked, then dropped.
  TensorSubmit& add_member(OpType op, const std::string& name, const TensorView& t) {
    const bool duplicate = !name.empty() && !unique_name(name);
    if (duplicate) {
      dropped_view_ = t;
      dropped_ = TensorSubmit(op, &name, &dropped_view_, nullptr);
      note_error(describe(dropped_) + ": the name appears twice in the group");
      return dropped_;
    }
    const size_t index = room_->items.size();
    TensorView* view = &room_->views.emplace_back(t);
    TensorSubmit& m = room_->items.emplace_back(
        op, name_for(op, name, nullptr, index), view, nullptr);
    items_ = room_->items.data();
    n_ = room_->items.size();
    checked(m);
    return m;
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
  /// Records a local failure: submit() sends the tensors as failed and throws it.
  void note_error(const std::string& why) {
    if (error_.empty()) error_ = why;
  }
  /// Room for an alltoall's splits, moved into its request.
  std::vector<int64_t>* splits() { return &splits_; }

  Handle submit(const std::string& handle_name) {
    // Unnamed calls are numbered here, every call, rejected or not: a call rejected on one
    // rank is still sent (marked failed) and pairs with the other ranks' same call.
    bool unnamed = false;
    if (room_ == nullptr) {
      if (!one_name_.empty()) {
        one_name_ = set_->auto_name(one_.op);
        unnamed = true;
      }
    } else {
      for (size_t i : room_->unnamed) {
        room_->names[i] = set_->auto_name(room_->items[i].op);
        unnamed = true;
      }
    }
    SubmitCommon common;
    if (grouped_) {
      group_key_ = group_key();
      common.group = &group_key_;
    }
    if (!error_.empty()) {
      // Sent anyway, marked failed: every other rank's matching call fails naming this rank
      // and the reason, instead of waiting for a tensor this rank will never send. The handle
      // behind them is this call's own, which nobody waits on.
      common.handle = std::make_shared<detail::HandleState>(*items_[0].name, static_cast<int>(n_));
      common.error = &error_;
      for (size_t i = 0; i < n_; ++i) {
        items_[i].input->data = nullptr;
        items_[i].input->stream = nullptr;
        items_[i].output = nullptr;
      }
      Status sent = set_->enqueue(items_, n_, common);
      if (!sent.ok()) {
        HVD_LOG(kDebug) << "a locally failed submission was not sent: " << sent.message();
      }
      throw InvalidArgumentError(error_);
    }
    auto state = make_pooled<detail::HandleState>(unnamed ? *items_[0].name : handle_name,
                                                  static_cast<int>(n_));
    state->set_driver(set_->as_driver());  // an untimed wait runs the set's cycles itself
    common.handle = state;
    common.enqueue_us = rt_->timeline()->enabled() ? now_us() : 0;
    throw_if_error(set_->enqueue(items_, n_, common));
    state_ = state.get();
    return Handle(std::move(state));  // moved, not copied: each reference count is an atomic
  }
  /// The state behind the last submit() (for results the public Handle does not expose),
  /// valid while that Handle lives.
  detail::HandleState* state() const { return state_; }
  Handle submit() { return submit(*items_[0].name); }

 private:
  /// The tensor's name: `name`, or for an unnamed call a placeholder (for messages) in
  /// `*storage` (a group's: its member `index`'s room), numbered at submit().
  const std::string* name_for(OpType op, const std::string& name, std::string* storage,
                              size_t index) {
    if (!name.empty()) return &name;
    if (storage == nullptr) {
      room_->unnamed.push_back(index);
      storage = &room_->names.emplace_back();
    }
    *storage = std::string(op_type_name(op)) + ".noname";
    return storage;
  }

  /// The local checks every tensor gets, and a CUDA tensor's device check.
  void checked(TensorSubmit& t) {
    check([&] { check_input(t, *t.input); });
    if (t.input->device.is_cuda()) {
      // The transport that takes CUDA tensors says whether this one is usable (NCCL: it must
      // be on this rank's GPU, docs/gpu.md). A failed device check goes through the
      // negotiation like every local error.
      Status dev = set_->transports().check_device(t.input->device, describe(t));
      if (!dev.ok()) note_error(dev.message());
    }
  }

  /// A key that every rank derives alike from the op, the group's size and the members'
  /// names (FNV-1a over them), so requests stay small however large the group: 15
  /// characters, which std::string holds without an allocation (every member carries a copy,
  /// and a thousand-member group's longer keys cost a malloc per member per step).
  std::string group_key() const {
    uint64_t h = 1469598103934665603ull;
    const auto mix = [&h](unsigned char c) { h = (h ^ c) * 1099511628211ull; };
    mix(static_cast<unsigned char>(items_[0].op));
    for (size_t n = n_; n > 0; n >>= 8) mix(static_cast<unsigned char>(n & 0xff));
    for (size_t i = 0; i < n_; ++i) {
      for (unsigned char c : *items_[i].name) mix(c);
      mix(0);  // the terminating zero byte
    }
    static const char kHex[] = "0123456789abcdef";
    std::string key = "g";  // then the hash's low 56 bits in hex
    for (int shift = 52; shift >= 0; shift -= 4) key += kHex[(h >> shift) & 0xf];
    return key;
  }

  /// False if `name` was already added to this group. The index of names is filled only
  /// when a second member is added.
  bool unique_name(const std::string& name) {
    if (room_->items.empty()) return true;
    NameIndex& names = room_->seen;
    if (!room_->seen_used) {
      room_->seen_used = true;
      for (size_t i = 0; i < room_->items.size(); ++i) {
        if (std::find(room_->unnamed.begin(), room_->unnamed.end(), i) == room_->unnamed.end()) {
          names.insert(*room_->items[i].name, 0);
        }
      }
    }
    return names.insert(name, 0);
  }

  // The input `t` (shape not yet moved) of tensor `q`.
  static void check_input(const TensorSubmit& q, const TensorView& t) {
    const char* role = "input";
    if (negative_dimension(t.shape)) {
      throw InvalidArgumentError(describe(q) + ": " + role + " has a negative dimension " +
                                 shape_str(t.shape));
    }
    if (data_missing(t.data, t.shape)) {
      throw InvalidArgumentError(describe(q) + ": " + role + " data pointer is null");
    }
    if (t.device.is_cuda() && !nccl_built()) {  // NCCL builds: checked in checked()
      throw InvalidArgumentError(
          describe(q) + ": " + role + " is on " + t.device.str() +
          (cuda_built() ? "; CUDA tensors need a build of horovod_cpp with NCCL"
                        : " but this build of horovod_cpp has no CUDA support"));
    }
  }

  /// A group's per-thread lists.
  struct GroupRoom {
    std::vector<TensorSubmit> items;
    std::vector<TensorView> views;    // the members' copied views
    std::vector<std::string> names;   // unnamed members' names
    std::vector<size_t> unnamed;      // which members those are
    NameIndex seen;                   // the members' names, for duplicates
    bool seen_used = false;           // `seen` holds this submission's names
  };
  static constexpr size_t kSpareMembers = 1024;
  static GroupRoom& group_room() {
    thread_local GroupRoom room;
    return room;
  }

  std::shared_ptr<Runtime> rt_;
  ProcessSetState* set_ = nullptr;
  std::shared_ptr<ProcessSetState> held_set_;  // a set other than the global one
  TensorSubmit one_;                           // a one-tensor call's tensor
  std::string one_name_;                       // its placeholder, then number, if unnamed
  TensorSubmit* items_ = nullptr;              // the tensors to submit
  size_t n_ = 0;
  GroupRoom* room_ = nullptr;                  // a group's lists; null for one tensor
  TensorSubmit dropped_;                       // a group's duplicate member, never submitted
  TensorView dropped_view_;
  std::vector<int64_t> splits_;
  std::string group_key_;
  std::string error_;  // the first local failure; empty if none
  bool grouped_ = false;
  detail::HandleState* state_ = nullptr;
};

void set_reduction(TensorSubmit& q, ReduceOp op, double pre, double post) {
  q.reduce_op = op;
  q.prescale = pre;
  q.postscale = post;
  const DataType dtype = q.input->dtype;
  if (dtype == DataType::kBool && op == ReduceOp::kAverage) {
    throw InvalidArgumentError(describe(q) + ": op average is not defined for bool tensors");
  }
  if (scaling_unsupported(dtype, q.input->device, pre, post)) {
    throw InvalidArgumentError(describe(q) + ": prescale_factor/postscale_factor need a "
                               "floating-point tensor" +
                               (dtype == DataType::kBool ? "" : " on a CUDA device") + ", not " +
                               dtype_name(dtype));
  }
}

// A grouped call's lists must pair up and be non-empty.
void check_group(const char* what, size_t names, size_t tensors) {
  if (names != tensors || tensors == 0) {
    throw InvalidArgumentError(std::string(what) + ": " + std::to_string(names) + " names for " +
                               std::to_string(tensors) + " tensors");
  }
}

void check_not_scalar(const TensorSubmit& q) {
  if (q.input->shape.empty()) {
    throw InvalidArgumentError(describe(q) + ": needs at least one dimension (got a scalar; "
                               "give it shape [1])");
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
// Both public overloads end here, giving up their by-value views (no further Shape copies).
Handle submit_allreduce(const std::string& name, TensorView&& input, TensorView* output,
                        const AllreduceOptions& options) {
  Submission sub("allreduce", options.process_set);
  TensorSubmit& q = sub.add(OpType::kAllreduce, name, &input, output);
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
  Submission sub("grouped_allreduce", options.process_set);
  check_group("grouped_allreduce", names.size(), tensors.size());
  sub.begin_group(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    TensorSubmit& q = sub.add_member(OpType::kAllreduce, names[i], tensors[i]);
    sub.check(
        [&] { set_reduction(q, options.op, options.prescale_factor, options.postscale_factor); });
  }
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
  TensorSubmit& q = sub.add(OpType::kAllgather, name, &input, nullptr);
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
  sub.begin_group(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    TensorSubmit& q = sub.add_member(OpType::kAllgather, names[i], inputs[i]);
    sub.check([&] { check_not_scalar(q); });
  }
  return sub.submit("allgather group of " + std::to_string(inputs.size()));
}

Handle broadcast_async(const std::string& name, TensorView tensor, int root_rank, ProcessSet set) {
  Submission sub("broadcast", set);
  TensorSubmit& q = sub.add(OpType::kBroadcast, name, &tensor, nullptr);
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
    for (int64_t v : splits) {
      if (v < 0) throw InvalidArgumentError(describe(q) + ": negative split " + std::to_string(v));
      sum += v;
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
  Submission sub("alltoall", set);
  TensorSubmit& q = sub.add(OpType::kAlltoall, name, &input, nullptr);
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
  Submission sub("reducescatter", options.process_set);
  TensorSubmit& q = sub.add(OpType::kReducescatter, name, &input, nullptr);
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
  sub.begin_group(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    TensorSubmit& q = sub.add_member(OpType::kReducescatter, names[i], inputs[i]);
    sub.check([&] { check_reducescatter(q, options); });
  }
  return sub.submit("reducescatter group of " + std::to_string(inputs.size()));
}

// ---- join, barrier, timeline --------------------------------------------------------------

int join() {
  Submission sub("join", ProcessSet{});
  const std::string name = kJoinName;
  TensorView none(nullptr, DataType::kUInt8, {0});
  sub.add(OpType::kJoin, name, &none, nullptr);
  const Handle h = sub.submit("join");
  h.wait();
  return static_cast<int>(sub.state()->value());  // the last rank to join (h keeps it)
}

void barrier(ProcessSet set) {
  Submission sub("barrier", set);
  const std::string name = "horovod_cpp.barrier";
  TensorView none(nullptr, DataType::kUInt8, {0});
  sub.add(OpType::kBarrier, name, &none, nullptr);
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
