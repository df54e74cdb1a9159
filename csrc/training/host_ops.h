// Copyright horovod_cpp authors. Private: the tensor operations of the gradient engine
// (training/grad_reducer.h, training/semisync.h) on hvd::Parameter's host float32 buffers,
// for hvd::DistributedOptimizer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "horovod_cpp/training.h"

namespace hvd {
namespace detail {

/// A host buffer of the engine: either live float32 storage it borrows (a Parameter's
/// gradient or value, an optimizer's state tensor), kept alive by `owner`, or data it owns.
struct HostBuffer {
  DataType dtype = DataType::kFloat32;
  Shape shape;
  float* borrowed = nullptr;     ///< live float32 storage, or null: the data is owned
  std::shared_ptr<void> owner;   ///< keeps `borrowed` alive while the buffer refers to it
  std::vector<float> f32;        ///< owned float32 data
  std::vector<uint16_t> f16;     ///< owned float16 data (the wire form of fp16 compression)
  std::vector<int64_t> i64;      ///< owned int64 data (sparse row indices)

  /// The float32 elements (borrowed or owned).
  float* floats() { return borrowed ? borrowed : f32.data(); }
  const float* floats() const { return borrowed ? borrowed : f32.data(); }
  size_t count() const { return static_cast<size_t>(num_elements(shape)); }
};

/// The engine's Ops on Parameters (see GradReducer and SemiSyncEngine for the contract).
class HostOps {
 public:
  using Param = ParameterPtr;
  using Tensor = HostBuffer;

  /// `inner`: the wrapped optimizer (stepped, and its float32 state averaged by local SGD
  /// when `average_state`); `params`: its parameters.
  HostOps(std::shared_ptr<Optimizer> inner, ParameterList params, bool average_state)
      : inner_(std::move(inner)), params_(std::move(params)), average_state_(average_state) {}

  bool trainable(const ParameterPtr&) const { return true; }
  bool sparse_grad(const ParameterPtr& p) const { return p->grad_kind() == GradKind::kSparse; }
  void dense_grad(ParameterPtr& p, HostBuffer& out) const;
  void sparse_rows(ParameterPtr& p, double scale, HostBuffer& indices, HostBuffer& values) const;
  void scale(HostBuffer& b, double factor) const;
  bool compressible(const HostBuffer& b) const { return b.dtype == DataType::kFloat32; }
  void to_half(const HostBuffer& src, HostBuffer& out) const;
  void from_half(const HostBuffer& half, HostBuffer& dst) const;
  TensorView view(const HostBuffer& b) const;
  void put_dense_grad(ParameterPtr& p, HostBuffer& reduced) const;
  void put_sparse_grad(ParameterPtr& p, const hvd::Tensor& indices, const hvd::Tensor& values) const;
  /// Forgets the borrowed storage; keeps the owned capacity for the next step.
  void release(HostBuffer& b) const {
    b.borrowed = nullptr;
    b.owner.reset();
  }

  // Semi-synchronous modes.
  void dense_grad_copy(const ParameterPtr& p, HostBuffer& out) const;
  void step() { inner_->step(); }
  std::vector<std::pair<std::string, HostBuffer>> averaged() const;
  void clone(const HostBuffer& src, HostBuffer& out) const;
  void empty_like(const HostBuffer& src, HostBuffer& out) const;
  void fold(HostBuffer& target, const HostBuffer& mean, const HostBuffer& snapshot) const;

 private:
  std::shared_ptr<Optimizer> inner_;
  ParameterList params_;
  bool average_state_;
};

}  // namespace detail
}  // namespace hvd
