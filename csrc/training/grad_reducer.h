// Copyright horovod_cpp authors. Private: the gradient engine of both DistributedOptimizers,
// hvd::DistributedOptimizer (Parameter buffers, training/host_ops.h) and
// hvd::torch::DistributedOptimizer (at::Tensor, adapters/torch/torch_ops.h).
//
// The policy is written here once: pass counting (backward_passes_per_step, with the optional
// average of the aggregated passes), the allreduce options (op, predivide factor split into
// prescale and postscale), fp16 compression on the wire, sparse gradients as allgathers of
// indices and value rows (scaled by 1/size() for an average), and the life of the buffers in
// flight. A framework supplies only the few tensor operations the policy needs (the Ops
// concept below). Includes public headers only: the LibTorch adapter includes it too.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "horovod_cpp/errors.h"
#include "horovod_cpp/training.h"
#include "training/in_flight.h"

namespace hvd {
namespace detail {

/// Checks the options both DistributedOptimizers share (InvalidArgumentError naming the
/// option; the message starts with `who`, e.g. "DistributedOptimizer: ").
void validate_distributed_options(const DistributedOptions& opts, const std::string& who);

/// The allreduce options of a gradient: the op and, for an average, the predivide factor as
/// prescale 1/f and postscale f (the average's 1/size() is the library's).
AllreduceOptions gradient_allreduce_options(const DistributedOptions& opts);

/// The factor of the gradients accumulated over backward_passes_per_step passes: 1/k when
/// average_aggregated_gradients, else 1.
double aggregated_pass_scale(const DistributedOptions& opts);

/// True when the options ask for a semi-synchronous mode (staleness or local SGD).
inline bool wants_semi_sync(const DistributedOptions& opts) {
  return opts.staleness != 0 || opts.local_sgd_period != 0 || opts.local_sgd_warmup_steps != 0;
}

/// The synchronous gradient reduction over a framework's tensors.
///
/// `Ops` is the framework's glue, a class with:
///   using Param = ...;   a parameter as the optimizer holds it (kept alive by the engine)
///   using Tensor = ...;  a buffer owned by the operation while it is in flight
///   bool trainable(const Param&)             the parameter takes part in steps
///   bool sparse_grad(const Param&)           this step's gradient is a set of rows
///   void dense_grad(Param&, Tensor& out)     out: the gradient to reduce in place, contiguous
///                                            (zeros if none, densified if sparse)
///   void sparse_rows(Param&, double scale, Tensor& indices, Tensor& values)
///                                            copies of the rows: indices [nnz(, dims)] int64,
///                                            values [nnz, ...] times `scale`
///   void scale(Tensor&, double)              in place
///   bool compressible(const Tensor&)         fp16 on the wire applies (floating, not fp16)
///   void to_half(const Tensor& src, Tensor& out) / void from_half(const Tensor& h, Tensor& dst)
///   TensorView view(const Tensor&)
///   void put_dense_grad(Param&, Tensor& reduced)  the reduced gradient into the parameter
///   void put_sparse_grad(Param&, const hvd::Tensor& indices, const hvd::Tensor& values)
///   void release(Tensor&)                    after completion: drop or keep for reuse
///
/// Thread-safety is the caller's (the LibTorch adapter's hooks take its lock).
template <class Ops>
class GradReducer {
 public:
  using Param = typename Ops::Param;
  using Buffer = typename Ops::Tensor;

  /// One parameter's reduction and the buffers it owns while in flight.
  struct Slot {
    Param param;
    std::string name;   // the parameter's name
    std::string cname;  // the collective's name
    int passes = 0;
    bool started = false;
    bool sparse = false;      // allgathers of rows (else an allreduce)
    bool compressed = false;  // fp16 on the wire
    Handle h, hi, hv;         // allreduce; allgathers of indices and values
    Buffer grad, half, indices, values;
  };

  /// `who` starts every error message (e.g. "DistributedOptimizer: ").
  GradReducer(Ops ops, DistributedOptions opts, std::string who)
      : ops_(std::move(ops)), opts_(std::move(opts)), who_(std::move(who)) {}

  /// Never blocks and never frees memory in flight: slots whose collectives have not
  /// finished (e.g. after a timed-out wait) are parked until they do.
  ~GradReducer() {
    for (Slot& s : slots_) {
      if (s.started) park_owned(std::vector<Handle>{s.h, s.hi, s.hv}, std::move(s));
    }
  }
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  /// Adds a parameter; its collectives are named "<name_prefix>.<name>".
  void add(Param param, const std::string& name) {
    Slot s;
    s.param = std::move(param);
    s.name = name;
    s.cname = opts_.name_prefix + "." + name;
    slots_.push_back(std::move(s));
  }

  size_t size() const { return slots_.size(); }
  Slot& slot(size_t i) { return slots_[i]; }
  const Slot& slot(size_t i) const { return slots_[i]; }
  Ops& ops() { return ops_; }

  /// Counts one backward pass of slot i and, on the backward_passes_per_step-th, starts its
  /// reduction unless `defer` (the semi-synchronous modes communicate from step()). Throws
  /// InvalidArgumentError past the pass count.
  void mark_ready(size_t i, bool defer) {
    Slot& s = slots_[i];
    if (s.started || s.passes >= opts_.backward_passes_per_step) {
      throw InvalidArgumentError(
          who_ + "the gradient of '" + s.name + "' was marked ready more than backward_passes_per_step (" +
          std::to_string(opts_.backward_passes_per_step) +
          ") times before step(); call step() (or synchronize()) and zero_grad() between steps, or raise "
          "backward_passes_per_step (with autograd hooks, a parameter used twice in one graph is reduced once, "
          "after its last use, only if each use goes through one accumulation)");
    }
    synchronized_ = false;
    if (++s.passes == opts_.backward_passes_per_step && !defer) start(s);
  }

  /// Starts the reductions not started yet (trainable parameters only), waits for all of them
  /// and puts the reduced gradients into the parameters. Idempotent until the next
  /// mark_ready(). A timed-out wait throws TimeoutError and leaves the slot in flight (its
  /// buffers owned by it): calling synchronize() again waits again.
  void synchronize() {
    if (synchronized_) return;
    for (Slot& s : slots_) {
      if (!s.started && ops_.trainable(s.param)) start(s);
    }
    for (Slot& s : slots_) {
      if (s.started) finish(s);
    }
    synchronized_ = true;
  }

  /// After the wrapped optimizer's step: the next step starts afresh.
  void end_step() {
    synchronized_ = false;
    for (Slot& s : slots_) s.passes = 0;
  }

  /// Resets the pass counters; throws InvalidArgumentError while a reduction is in flight.
  void zero_grad() {
    for (Slot& s : slots_) {
      if (s.started) {
        throw InvalidArgumentError(who_ + "zero_grad() while the reduction of '" + s.name +
                                   "' is in flight; call step() or synchronize() first");
      }
    }
    end_step();
  }

  /// Number of slots whose reduction was started and not completed yet.
  size_t in_flight() const {
    size_t n = 0;
    for (const Slot& s : slots_) n += s.started ? 1 : 0;
    return n;
  }

 private:
  void start(Slot& s) {
    const double pass = aggregated_pass_scale(opts_);
    s.sparse = ops_.sparse_grad(s.param) && !opts_.sparse_as_dense;
    if (s.sparse) {
      const double scale = opts_.op == ReduceOp::kAverage ? pass / static_cast<double>(hvd::size()) : pass;
      ops_.sparse_rows(s.param, scale, s.indices, s.values);
      s.hi = allgather_async(s.cname + ".indices", ops_.view(s.indices));
      s.hv = allgather_async(s.cname + ".values", ops_.view(s.values));
      s.started = true;
      return;
    }
    ops_.dense_grad(s.param, s.grad);
    if (pass != 1.0) ops_.scale(s.grad, pass);
    s.compressed = opts_.compression == Compression::kFP16 && ops_.compressible(s.grad);
    if (s.compressed) ops_.to_half(s.grad, s.half);
    s.h = allreduce_async(s.cname, ops_.view(s.compressed ? s.half : s.grad), gradient_allreduce_options(opts_));
    s.started = true;
  }

  void finish(Slot& s) {
    if (s.sparse) {
      s.hi.wait_up_to(opts_.timeout);
      s.hv.wait_up_to(opts_.timeout);
      ops_.put_sparse_grad(s.param, s.hi.result(), s.hv.result());
      ops_.release(s.indices);
      ops_.release(s.values);
    } else {
      s.h.wait_up_to(opts_.timeout);
      if (s.compressed) ops_.from_half(s.half, s.grad);
      ops_.put_dense_grad(s.param, s.grad);
      ops_.release(s.grad);
      ops_.release(s.half);
    }
    s.started = false;
    s.passes = 0;
    s.h = s.hi = s.hv = Handle();
  }

  Ops ops_;
  const DistributedOptions opts_;
  const std::string who_;
  std::vector<Slot> slots_;
  bool synchronized_ = false;
};

}  // namespace detail
}  // namespace hvd
