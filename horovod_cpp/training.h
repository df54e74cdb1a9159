// Copyright horovod_cpp authors. Public API: framework-agnostic data-parallel training.
//
// The pieces, in the order a training program uses them:
//
//   * Parameter: a named float32 tensor with a gradient that is either dense (same shape as
//     the value) or sparse (row indices + value rows, like an embedding's gradient).
//   * Optimizer: the interface of an update rule, with the reference SGD and Adam.
//   * broadcast_parameters() / broadcast_optimizer_state(): make every rank start identical,
//     from a random init or from a checkpoint (save_checkpoint / load_checkpoint) loaded on
//     rank 0 only.
//   * DistributedOptimizer: wraps any Optimizer. mark_ready(p) starts the allreduce (or, for a
//     sparse gradient, the allgather) of p's gradient at once, so communication overlaps the
//     rest of the backward pass; step() waits for all of them and runs the wrapped step.
//
// Every collective issued here is named after the parameter, so parameter names must be
// unique and identical on every rank; the constructors check that across ranks and throw a
// MismatchError (on every rank) naming the rank and the parameter that differ.
//
// No MPI or framework header is needed: this builds on the public API of horovod_cpp.h only.
// The LibTorch adapter is horovod_cpp/torch.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "horovod_cpp/api.h"
#include "horovod_cpp/handle.h"
#include "horovod_cpp/tensor.h"
#include "horovod_cpp/types.h"

namespace hvd {

/// Whether a parameter's gradient is a dense tensor or a set of rows.
enum class GradKind : uint8_t {
  kDense = 0,   ///< the gradient has the shape of the value
  kSparse = 1,  ///< the gradient is (row indices, value rows): only touched rows are present
};

/// A trainable tensor: a name, a float32 value and its gradient.
///
/// The value is stored row-major with shape shape(); "rows" are slices along dimension 0 (a
/// 1-D parameter has rows of one element). The gradient kind is fixed at construction, so
/// that every rank treats the parameter the same way even on a step where it received no
/// gradient. Gradients accumulate (add_dense_grad adds, add_sparse_grad appends rows; duplicate
/// row indices are allowed and mean a sum) until zero_grad().
class Parameter {
 public:
  /// A parameter named `name` of shape `shape` (at least one dimension), with value
  /// `init` (numel(shape) floats) or zeros when `init` is empty.
  Parameter(std::string name, Shape shape, std::vector<float> init = {},
            GradKind grad_kind = GradKind::kDense);

  const std::string& name() const { return name_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return static_cast<int64_t>(value_.size()); }
  /// Number of rows: shape()[0].
  int64_t rows() const { return shape_[0]; }
  /// Elements per row: numel() / rows() (1 for a 1-D parameter).
  int64_t row_size() const;
  GradKind grad_kind() const { return grad_kind_; }

  /// The value, numel() floats.
  std::vector<float>& value() { return value_; }
  const std::vector<float>& value() const { return value_; }
  /// A view of the value (for collectives); valid while this Parameter lives.
  TensorView value_view();

  /// True if a gradient was set or added since the last zero_grad().
  bool has_grad() const { return has_grad_; }

  /// The dense gradient, numel() floats (zeros until something is added). Marks the
  /// gradient as present. Throws InvalidArgumentError for a sparse parameter.
  std::vector<float>& dense_grad();
  const std::vector<float>& dense_grad() const { return dense_grad_; }
  /// Adds `g` (numel() floats) to the dense gradient.
  void add_dense_grad(const std::vector<float>& g);

  /// Appends rows to the sparse gradient: `indices` are row numbers in [0, rows()) and
  /// `values` holds indices.size() * row_size() floats, row i belonging to indices[i].
  /// Throws InvalidArgumentError for a dense parameter or malformed input.
  void add_sparse_grad(const std::vector<int64_t>& indices, const std::vector<float>& values);
  /// Replaces the sparse gradient (same contract as add_sparse_grad).
  void set_sparse_grad(std::vector<int64_t> indices, std::vector<float> values);
  /// Row indices of the sparse gradient (may repeat; unsorted).
  const std::vector<int64_t>& sparse_indices() const { return sparse_indices_; }
  /// Value rows of the sparse gradient, sparse_indices().size() * row_size() floats.
  const std::vector<float>& sparse_values() const { return sparse_values_; }

  /// The gradient as a dense array of numel() floats, whatever its kind (sparse rows are
  /// summed into their positions). Zeros when there is no gradient.
  std::vector<float> grad_as_dense() const;

  /// Forgets the gradient (dense zeros, sparse empty).
  void zero_grad();

 private:
  std::string name_;
  Shape shape_;
  GradKind grad_kind_;
  std::vector<float> value_;
  bool has_grad_ = false;
  std::vector<float> dense_grad_;
  std::vector<int64_t> sparse_indices_;
  std::vector<float> sparse_values_;
};

/// Parameters are shared between the model that computes their gradients and the optimizers.
using ParameterPtr = std::shared_ptr<Parameter>;
using ParameterList = std::vector<ParameterPtr>;

/// Convenience: std::make_shared<Parameter>(...).
ParameterPtr make_parameter(std::string name, Shape shape, std::vector<float> init = {},
                            GradKind grad_kind = GradKind::kDense);

/// One named tensor of an optimizer's state (a momentum buffer, a step counter, ...).
struct StateEntry {
  std::string name;
  TensorView view;  ///< points into the optimizer; valid while the optimizer lives
};

/// The interface of an update rule over a list of parameters.
///
/// State is allocated when the optimizer is constructed (not lazily on the first step), so that
/// state() lists the same entries on every rank at any time: broadcast_optimizer_state() and
/// checkpoints rely on it.
class Optimizer {
 public:
  explicit Optimizer(ParameterList params);
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// Applies one update to every parameter from its current gradient. Parameters without a
  /// gradient (has_grad() false) are skipped entirely, as in PyTorch.
  virtual void step() = 0;

  /// Clears the gradient of every parameter.
  virtual void zero_grad();

  /// The parameters, in the order given at construction.
  const ParameterList& parameters() const { return params_; }

  /// The learning rate used by the next step().
  virtual double learning_rate() const = 0;
  virtual void set_learning_rate(double lr) = 0;

  /// The state tensors, in a fixed order (names are unique).
  virtual std::vector<StateEntry> state() = 0;
  /// The scalar hyperparameters by name (learning rate, momentum, ...); writable through the
  /// pointers, which stay valid while the optimizer lives.
  virtual std::vector<std::pair<std::string, double*>> hyperparameters() = 0;

 protected:
  ParameterList params_;
};

/// Options of SGD (PyTorch's semantics).
struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;  ///< L2 penalty added to the gradient: g += weight_decay * p
  bool nesterov = false;
};

/// Stochastic gradient descent with optional momentum, Nesterov momentum and weight decay:
///   g = grad + wd * p;  buf = g (first step) or momentum * buf + (1 - dampening) * g;
///   g = nesterov ? g + momentum * buf : buf;  p -= lr * g.
/// A sparse gradient updates only its rows when momentum and weight decay are zero; otherwise
/// it is applied as the equivalent dense gradient.
class SGD : public Optimizer {
 public:
  SGD(ParameterList params, SGDOptions options = {});
  void step() override;
  double learning_rate() const override { return lr_; }
  void set_learning_rate(double lr) override { lr_ = lr; }
  std::vector<StateEntry> state() override;
  std::vector<std::pair<std::string, double*>> hyperparameters() override;
  const SGDOptions& options() const { return opts_; }

 private:
  SGDOptions opts_;
  double lr_;
  std::vector<std::vector<float>> momentum_;  // one buffer per parameter
  std::vector<double> steps_;                 // per-parameter count of steps taken
};

/// Options of Adam (PyTorch's semantics).
struct AdamOptions {
  double lr = 0.001;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  ///< L2 penalty added to the gradient (not decoupled)
};

/// Adam with bias correction:
///   t += 1; g = grad + wd * p; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
///   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
/// Sparse gradients are applied as the equivalent dense gradient.
class Adam : public Optimizer {
 public:
  Adam(ParameterList params, AdamOptions options = {});
  void step() override;
  double learning_rate() const override { return opts_.lr; }
  void set_learning_rate(double lr) override { opts_.lr = lr; }
  std::vector<StateEntry> state() override;
  std::vector<std::pair<std::string, double*>> hyperparameters() override;
  const AdamOptions& options() const { return opts_; }

 private:
  AdamOptions opts_;
  std::vector<std::vector<float>> m_, v_;
  std::vector<double> steps_;
};

/// How gradients travel between ranks.
enum class Compression : uint8_t {
  kNone = 0,  ///< in their own dtype
  kFP16 = 1,  ///< converted to IEEE float16 for the allreduce, converted back afterwards
};

/// Options of DistributedOptimizer, as in Horovod.
struct DistributedOptions {
  /// Number of backward passes accumulated locally before the gradients are reduced: the
  /// allreduce of a parameter starts on every k-th mark_ready(), and step() must follow.
  int backward_passes_per_step = 1;
  /// If true, the gradients accumulated over backward_passes_per_step passes are divided by
  /// that number (their average rather than their sum, as Horovod's TensorFlow option).
  bool average_aggregated_gradients = false;
  /// kAverage (default) or kSum (Adasum is not provided).
  ReduceOp op = ReduceOp::kAverage;
  /// With kAverage, gradients are multiplied by 1/f before the sum and by f/size() after it
  /// (same result, a different rounding, useful to avoid fp16 overflow).
  double gradient_predivide_factor = 1.0;
  /// fp16 on the wire for dense gradients (sparse value rows travel uncompressed).
  Compression compression = Compression::kNone;
  /// Reduce sparse gradients as dense ones (allreduce of the densified gradient).
  bool sparse_as_dense = false;
  /// Prefix of the collective names: "<prefix>.<parameter name>".
  std::string name_prefix = "DistributedOptimizer";
  /// How long step()/synchronize() wait for the collectives; zero means forever. On expiry
  /// a TimeoutError is thrown; the collectives go on, their buffers stay allocated until they
  /// finish (even if the optimizer is destroyed), and calling step()/synchronize() again waits
  /// again.
  std::chrono::milliseconds timeout{0};

  // ---- Semi-synchronous modes (docs/training.md, "Semi-synchronous training"). At most one of
  // staleness and local_sgd_period may be non-zero; with both zero (the default) the optimizer
  // is fully synchronous and behaves exactly as described above.

  /// Bounded staleness s >= 0: step() submits this step's gradients asynchronously and applies
  /// the averaged gradients of the step s steps earlier (nothing during the first s steps), so
  /// communication overlaps s steps of computation. No rank gets more than s steps ahead of the
  /// slowest, and every rank applies the same sequence of updates, so the parameters stay
  /// identical. Gradients are reduced as dense tensors (sparse ones are densified).
  int staleness = 0;
  /// Local SGD: k > 0 makes each rank step on its own gradients and averages the parameters
  /// every k steps (after steps k, 2k, ... counted from the end of the warmup).
  int local_sgd_period = 0;
  /// Local SGD: the first n steps are synchronous (averaged gradients), as post-local SGD.
  int local_sgd_warmup_steps = 0;
  /// Local SGD: also average the optimizer's float32 state (momentum buffers, Adam moments).
  bool local_sgd_average_state = false;
  /// Local SGD: overlap the averaging with the next step. The averaging of the parameters
  /// taken after step t starts asynchronously and is folded in at step t + 1 as
  /// p = average + (p - snapshot), so a rank never waits for it; the parameters are then
  /// identical only after flush(). False: step t waits for the average (identical at once).
  bool local_sgd_overlap = false;
};

/// Wraps an optimizer to average gradients across ranks before each of its steps.
///
/// Usage per training step, on every rank, in the same order of parameters or not:
///
///     opt.zero_grad();
///     ... backward: as each parameter's gradient becomes final, opt.mark_ready(*p) ...
///     opt.step();   // waits for all reductions, then runs the wrapped optimizer's step
///
/// mark_ready() starts the parameter's collective at once (asynchronously), so
/// communication overlaps the rest of the backward pass. Parameters never marked are
/// reduced by synchronize()/step() (a missing gradient counts as zero). While a collective is
/// in flight the parameter's gradient must not be touched.
///
/// Dense gradients: allreduce with the configured op, predivide factor and compression.
/// Sparse gradients: allgather of the row indices and of the value rows (scaled by 1/size()
/// for kAverage), so each rank ends up with the concatenation of every rank's rows (with
/// duplicates, which optimizers sum); never densified unless sparse_as_dense.
class DistributedOptimizer : public Optimizer {
 public:
  /// Wraps `optimizer`, reducing the gradients of optimizer->parameters(). Collective: checks
  /// across ranks that the parameter names are unique and that names, shapes and gradient
  /// kinds are identical on every rank (MismatchError on every rank otherwise).
  DistributedOptimizer(std::shared_ptr<Optimizer> optimizer, DistributedOptions options = {});
  /// Never blocks: collectives still in flight (e.g. after a timed-out step()) keep the
  /// buffers they use, and the parameters, alive until they finish.
  ~DistributedOptimizer() override;

  /// Declares `param`'s gradient final for this backward pass. On the last of
  /// backward_passes_per_step passes it starts the parameter's collective. Throws
  /// InvalidArgumentError for a parameter this optimizer does not hold, or if marked more
  /// than backward_passes_per_step times before step().
  void mark_ready(Parameter& param);
  /// mark_ready() by name.
  void mark_ready(const std::string& name);

  /// Starts the collectives not started yet, waits for all of them and writes the reduced
  /// gradients into the parameters. Idempotent until the next mark_ready().
  void synchronize();

  /// synchronize() (unless already done), then the wrapped optimizer's step(). In a
  /// semi-synchronous mode (staleness or local SGD) step() does that mode's communication and
  /// update instead (see DistributedOptions).
  void step() override;

  /// Semi-synchronous modes: completes every pending communication, in order, on every rank:
  /// with staleness s, waits for and applies the s delayed updates still in flight; with
  /// local SGD, averages the parameters (and state if configured) now. Afterwards every rank
  /// holds the same parameters (a consistent point for checkpoints) and the next s steps again
  /// apply no update. Must be called on every rank at the same step. A no-op when synchronous.
  void flush();

  /// Number of step() calls since construction.
  int64_t steps_taken() const { return steps_taken_; }
  /// True when a semi-synchronous mode (staleness > 0 or local_sgd_period > 0) is on.
  bool semi_synchronous() const { return semi_; }

  /// Clears the gradients and the pass counters. Throws if collectives are in flight.
  void zero_grad() override;

  double learning_rate() const override { return inner_->learning_rate(); }
  void set_learning_rate(double lr) override { inner_->set_learning_rate(lr); }
  std::vector<StateEntry> state() override { return inner_->state(); }
  std::vector<std::pair<std::string, double*>> hyperparameters() override {
    return inner_->hyperparameters();
  }

  /// The wrapped optimizer.
  Optimizer& wrapped() { return *inner_; }
  const DistributedOptions& options() const { return opts_; }

 private:
  struct Engine;  // the gradient engine on Parameter buffers (csrc/training/distributed_optimizer.cc)
  size_t index_of(const std::string& name) const;

  std::shared_ptr<Optimizer> inner_;
  DistributedOptions opts_;
  std::unique_ptr<Engine> engine_;
  int64_t steps_taken_ = 0;
  bool semi_ = false;  // a semi-synchronous mode is on
};

/// Stale-synchronous step pacing for programs that step independently (local SGD, or any
/// loop), in the spirit of a SemiSyncRunHook: call step() once at the start of every training
/// step; it returns once no rank is more than `staleness` steps behind this one, i.e. when
/// every rank has started step t - staleness (t = this rank's step being started).
///
/// Each call submits a one-element allreduce named "<name>.<t mod (staleness+1)>" and waits
/// only for the one submitted `staleness` calls earlier, so a rank that is not ahead never
/// blocks on communication. staleness = 0 is a barrier per step.
///
/// End of training: a rank with no more steps calls finish(), which joins (hvd::join()):
/// until every rank has finished, it answers the other ranks' step allreduces with zeros, so
/// ranks that run more steps are never blocked by it. Every rank must call finish() (or
/// join()) eventually. The guard must be constructed in the same order on every rank (its
/// collective names come from `name`).
class StepGuard {
 public:
  /// A guard letting ranks run at most `staleness` (>= 0) steps ahead of the slowest.
  /// `timeout` bounds each wait (TimeoutError on expiry); zero waits forever.
  explicit StepGuard(int staleness, std::string name = "StepGuard",
                     std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  /// Never blocks: announcements still in flight keep their (tiny) buffers until they finish.
  ~StepGuard();
  StepGuard(const StepGuard&) = delete;
  StepGuard& operator=(const StepGuard&) = delete;

  /// Starts step steps() (the first call starts step 0): announces it to the other ranks and
  /// waits while this rank is more than staleness() steps ahead of the slowest. Returns the
  /// index of the step started.
  int64_t step();

  /// This rank has no more steps: waits for its own pending announcements (every rank makes
  /// them or joins), then joins (see hvd::join()). Returns the last rank to join. Collective
  /// in the sense of join().
  int finish();

  /// Number of step() calls made so far.
  int64_t steps() const { return steps_; }
  /// A lower bound of the number of steps every rank has started (what this rank has learned
  /// without waiting). Ranks that joined count as infinitely far ahead.
  int64_t slowest_started() const;
  int staleness() const { return staleness_; }

 private:
  int staleness_;
  std::string name_;
  std::chrono::milliseconds timeout_;
  int64_t steps_ = 0;
  int64_t known_ = 0;  // every rank has started at least this many steps
  bool finished_ = false;
  std::vector<int64_t>* bufs_;   // staleness+1 slots, owned (parked if destroyed while pending)
  std::vector<Handle> handles_;  // by slot
};

/// Checks, collectively, that a list of named entries is the same on every rank: `entries`
/// holds (name, description) pairs, e.g. ("fc1.weight", "shape [4,5]"). Names must be unique
/// on every rank (InvalidArgumentError otherwise, on every rank) and every rank's set of
/// (name, description) must equal rank 0's (MismatchError otherwise, on every rank, naming the
/// rank and the entry). `what` prefixes the message and `kind` names the entries ("parameter").
/// Collective; `timeout` zero waits forever. Used by the framework adapters.
void check_consistent_across_ranks(const std::vector<std::pair<std::string, std::string>>& entries,
                                   const std::string& what, const std::string& kind = "parameter",
                                   std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

/// Checks, collectively, that `params` have unique names and the same names, shapes and
/// gradient kinds on every rank. Throws InvalidArgumentError on every rank for duplicate
/// names and MismatchError on every rank when the ranks differ; the message names the rank
/// and the parameter. `what` prefixes the message.
void check_parameters_consistent(const ParameterList& params, const std::string& what);

/// Replaces every parameter's value by root_rank's. Collective (checks names first, as
/// check_parameters_consistent). `timeout` zero waits forever.
void broadcast_parameters(const ParameterList& params, int root_rank,
                          std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

/// Replaces the optimizer's state tensors and hyperparameters (learning rate included) by
/// root_rank's. Collective; the state names must agree across ranks (MismatchError).
void broadcast_optimizer_state(Optimizer& optimizer, int root_rank,
                               std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

/// Writes the parameters' values and, if given, the optimizer's state and hyperparameters
/// to `path` (a small binary format, native byte order). Local: typically rank 0 only.
/// Throws std::runtime_error on I/O failure.
void save_checkpoint(const std::string& path, const ParameterList& params,
                     Optimizer* optimizer = nullptr);

/// Reads a file written by save_checkpoint into `params` (matched by name; shapes must
/// agree) and, if given, into the optimizer's state and hyperparameters. Local: typically on
/// rank 0 only, followed by broadcast_parameters / broadcast_optimizer_state. Throws
/// std::runtime_error for a missing file, a malformed file, an unknown or missing name or a
/// shape mismatch.
void load_checkpoint(const std::string& path, const ParameterList& params,
                     Optimizer* optimizer = nullptr);

/// IEEE float32 -> float16 bits (round to nearest even; overflow becomes infinity).
uint16_t float_to_half(float f);
/// IEEE float16 bits -> float32 (exact).
float half_to_float(uint16_t h);

}  // namespace hvd
