// Copyright horovod_cpp authors. The LibTorch adapter: data-parallel training of LibTorch
// models with horovod_cpp (link horovod_cpp::torch). Not included by horovod_cpp.h.
//
// LibTorch has no C++ DistributedDataParallel; this is its counterpart:
//
//   hvd::init();
//   auto model = std::make_shared<Net>();
//   torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.01 * hvd::size()));
//   hvd::torch::DistributedOptimizer opt(sgd, *model);      // hooks every parameter
//   hvd::torch::broadcast_parameters(*model, 0);               // identical start everywhere
//   hvd::torch::broadcast_optimizer_state(sgd, 0);
//   for (...) {
//     opt.zero_grad();
//     loss(model->forward(x_shard), y_shard).backward();     // allreduces start in here
//     opt.step();                                              // wait, then sgd.step()
//   }
//
// Each parameter's gradient is reduced from a hook on its gradient accumulator, i.e. as soon
// as backward has produced it, so communication overlaps the rest of backward. Dense
// gradients are allreduced in place; sparse gradients (torch::nn::Embedding with
// sparse(true)) are allgathered as indices and values, never densified unless
// DistributedOptions::sparse_as_dense.
//
// Devices. Tensors live on the CPU or, when has_cuda_support(), on a CUDA device: the one the
// library uses on this rank (HOROVOD_CPP_CUDA_DEVICE when set, else hvd::local_rank(); pin the
// model there, as examples/train_digits.cc --cuda does). CUDA tensors follow Horovod's rules:
// a collective waits for the work already queued on torch's current CUDA stream when it is
// submitted (no synchronize() needed before it), and once its handle completes the result is
// ready for any stream. Outputs the library allocates come from LibTorch's CUDA caching
// allocator (installed the first time the adapter sees a CUDA tensor).
//
// Namespace note: the adapter lives in hvd::torch, so inside namespace hvd (or after `using
// namespace hvd`) spell LibTorch's namespace ::torch.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "horovod_cpp/horovod_cpp.h"
#include "horovod_cpp/training.h"

namespace hvd {
namespace torch {

/// The horovod_cpp dtype of a LibTorch scalar type. Throws InvalidArgumentError for types
/// horovod_cpp does not carry (complex, quantized, ...).
DataType to_hvd_dtype(c10::ScalarType type);

/// True when this adapter handles CUDA tensors: LibTorch has CUDA and horovod_cpp was built
/// with CUDA. Otherwise view() of a CUDA tensor throws InvalidArgumentError.
bool has_cuda_support();

/// A view of a contiguous CPU or CUDA tensor's storage (no copy). For a CUDA tensor the view
/// names its device and torch's current CUDA stream on that device (the collective waits for
/// the work queued there before it reads the data), and the first such call installs
/// LibTorch's CUDA caching allocator for the library's outputs (hvd::set_cuda_allocator).
/// Throws InvalidArgumentError for a non-contiguous or sparse tensor, a tensor on another kind
/// of device, or a CUDA tensor without has_cuda_support().
TensorView view(const at::Tensor& tensor);

/// A LibTorch tensor with the contents of `tensor` (e.g. the result of an allgather), on the
/// same device, without a copy: it shares `tensor`'s memory (host or CUDA) and keeps it alive.
/// Like any tensor made from foreign memory, its storage cannot be resized (resize_() to a
/// larger size throws); clone() it for a tensor that owns its memory.
at::Tensor to_torch(const Tensor& tensor);

/// The key type of torch::optim::Optimizer::state(): std::string in LibTorch 1.x, void* (the
/// parameter's TensorImpl) in 2.x.
using OptimizerStateKey =
    typename std::decay_t<decltype(std::declval<::torch::optim::Optimizer&>().state())>::key_type;

/// The key of `param`'s entry in torch::optim::Optimizer::state(), whichever LibTorch version
/// is in use (1.x: the address of its TensorImpl as text; 2.x: that address).
OptimizerStateKey optimizer_state_key(const at::Tensor& param);

/// Averages (by default) every gradient across ranks before the wrapped optimizer's step.
///
/// The constructor registers a post-hook on the gradient accumulator of every parameter of
/// the wrapped optimizer; the hook starts that parameter's allreduce (dense) or allgathers
/// (sparse) on the backward_passes_per_step-th pass. step() waits for all of them and calls
/// the wrapped optimizer's step(). Parameters that received no gradient are reduced as zeros
/// (or as an empty sparse gradient for parameters known to be sparse), so every rank steps
/// the same parameters. Options (op, gradient_predivide_factor, compression,
/// sparse_as_dense, backward_passes_per_step, timeout, name_prefix) are hvd::DistributedOptions.
/// Parameters may live on the CPU or on this rank's CUDA device (see the file comment); the
/// reductions then run there (NCCL), sparse indices included.
///
/// The wrapped optimizer must outlive this object, and its parameter groups must not change
/// after construction. Not copyable or movable (the hooks refer to it).
class DistributedOptimizer {
 public:
  /// Wraps `optimizer`; names come from `module.named_parameters()` and parameters of
  /// Embedding / EmbeddingBag modules built with sparse(true) are known to have sparse
  /// gradients. Every parameter of the optimizer must belong to `module`. Collective: checks
  /// across ranks that names and shapes agree (MismatchError on every rank otherwise).
  DistributedOptimizer(::torch::optim::Optimizer& optimizer, const ::torch::nn::Module& module,
                       DistributedOptions options = {});

  /// Wraps `optimizer` with explicit names for its parameters (every parameter of the
  /// optimizer must appear in `named_parameters`; names must be unique and identical on every
  /// rank).
  DistributedOptimizer(::torch::optim::Optimizer& optimizer,
                       const ::torch::OrderedDict<std::string, at::Tensor>& named_parameters,
                       DistributedOptions options = {});

  /// Wraps `optimizer`, naming its parameters "param_group.<g>.<i>" (so the optimizer must be
  /// built identically on every rank).
  explicit DistributedOptimizer(::torch::optim::Optimizer& optimizer, DistributedOptions options = {});

  /// Removes the hooks. Never blocks: reductions still in flight (e.g. after a timed-out
  /// step()) keep the tensors they use alive until they finish.
  ~DistributedOptimizer();
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  /// Starts the reductions the hooks have not started, waits for all of them and writes the
  /// reduced gradients into the parameters' .grad(). Idempotent until the next backward.
  void synchronize();

  /// synchronize() (unless called since the last backward), then the wrapped step(). With
  /// DistributedOptions::staleness or local_sgd_period set, step() runs that semi-synchronous
  /// mode instead (as hvd::DistributedOptimizer: the gradients are reduced from step(), not from
  /// the hooks; synchronize() is then unavailable).
  void step();

  /// Semi-synchronous modes: completes and applies every pending communication (the delayed
  /// updates with staleness; an averaging of the parameters now with local SGD), so every rank
  /// holds the same parameters. Call on every rank at the same step, e.g. before a checkpoint
  /// or before join(). A no-op when synchronous.
  void flush();

  /// Number of step() calls so far.
  int64_t steps_taken() const;

  /// The wrapped optimizer's zero_grad(); resets the pass counters. Throws if reductions are
  /// in flight.
  void zero_grad();

  /// Declares the parameter named `name` as having sparse gradients (used when it receives no
  /// gradient on a step, so it is reduced as an empty sparse gradient on that rank).
  void set_sparse(const std::string& name);

  /// Number of parameters whose reduction has been started (by the hooks, during backward)
  /// and not yet completed by synchronize()/step().
  size_t in_flight() const;

  /// The wrapped optimizer.
  ::torch::optim::Optimizer& optimizer() { return optimizer_; }
  const DistributedOptions& options() const { return opts_; }

  struct Impl;

 private:
  void init(const std::vector<std::pair<std::string, at::Tensor>>& named);

  ::torch::optim::Optimizer& optimizer_;
  DistributedOptions opts_;
  std::shared_ptr<Impl> impl_;
};

/// Stale-synchronous pacing of independent steps (see hvd::StepGuard in horovod_cpp/training.h).
using ::hvd::StepGuard;

/// Replaces every tensor of `named_tensors` by root_rank's, in place. Collective; names and
/// shapes must agree across ranks (MismatchError otherwise).
void broadcast_parameters(const ::torch::OrderedDict<std::string, at::Tensor>& named_tensors, int root_rank,
                          std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

/// Replaces the module's parameters and buffers (its state dict: e.g. BatchNorm statistics)
/// by root_rank's. Collective.
void broadcast_parameters(const ::torch::nn::Module& module, int root_rank,
                          std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

/// Replaces the optimizer's per-parameter state (momentum buffers, Adam moments and step
/// counts, ...) and every parameter group's options (learning rate, momentum, betas, ...)
/// by root_rank's. Works for any optimizer that implements LibTorch serialization (SGD, Adam,
/// AdamW, Adagrad, RMSprop, LBFGS). State that exists only on root_rank (e.g. loaded from a
/// checkpoint there) is created on the other ranks, on the device of each rank's own
/// parameters (the root's state may live on another GPU). Collective; the parameter groups must
/// have the same sizes and shapes on every rank (MismatchError otherwise).
void broadcast_optimizer_state(::torch::optim::Optimizer& optimizer, int root_rank,
                               std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

}  // namespace torch
}  // namespace hvd
