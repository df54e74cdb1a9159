// Copyright horovod_cpp authors. Public API: tensors handed to and returned by collectives.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "horovod_cpp/shape.h"
#include "horovod_cpp/types.h"

namespace hvd {

/// Number of elements of `shape` (1 for a scalar). A product that does not fit in int64_t
/// (a shape no tensor can have, e.g. one decoded from a corrupt message) saturates at
/// INT64_MAX instead of overflowing.
int64_t num_elements(const Shape& shape);

/// a * b, or INT64_MAX (INT64_MIN for a negative product) when it does not fit: size
/// arithmetic on shapes and counts that come from other ranks.
int64_t saturating_mul(int64_t a, int64_t b);

/// "[4,5]" for error messages.
std::string shape_str(const Shape& shape);

/// A non-owning view of a dense, contiguous (row-major) tensor.
///
/// The caller keeps the memory alive and untouched until the collective that uses it has
/// completed (its Handle reports done). `stream` is an optional CUDA stream (cudaStream_t
/// passed as void*) whose pending work produced the data; GPU collectives wait on it.
struct TensorView {
  void* data = nullptr;
  DataType dtype = DataType::kFloat32;
  Shape shape;
  Device device;
  void* stream = nullptr;

  TensorView() = default;
  TensorView(void* data_, DataType dtype_, Shape shape_, Device device_ = Device::cpu())
      : data(data_), dtype(dtype_), shape(std::move(shape_)), device(device_) {}

  /// Number of elements.
  int64_t numel() const { return num_elements(shape); }
  /// Number of bytes.
  int64_t nbytes() const;
};

/// An owning, contiguous tensor, returned by collectives whose output size the library
/// decides (allgather, alltoall, reducescatter). Copies share the storage. Results of
/// collectives on CUDA tensors live on the same CUDA device (device() says where).
class Tensor {
 public:
  Tensor() = default;
  /// Allocates zero-initialized storage for `shape` elements of `dtype`.
  Tensor(DataType dtype, Shape shape);
  /// Allocates storage for `shape` elements of `dtype` without initializing it (for outputs
  /// that are about to be overwritten).
  static Tensor empty(DataType dtype, Shape shape);

  DataType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return num_elements(shape_); }
  int64_t nbytes() const;
  void* data() { return storage_ ? storage_->data() : external_.get(); }
  const void* data() const { return storage_ ? storage_->data() : external_.get(); }
  /// Where the storage lives: the CPU, unless made by adopt().
  Device device() const { return device_; }
  /// A tensor over memory allocated elsewhere (for instance CUDA device memory): `memory`'s
  /// deleter frees it when the last copy of the tensor goes. `memory` may be null when the
  /// tensor has no elements.
  static Tensor adopt(DataType dtype, Shape shape, Device device, std::shared_ptr<void> memory);
  /// Typed access; T must match dtype() in size.
  template <typename T>
  T* data_as() {
    return static_cast<T*>(data());
  }
  template <typename T>
  const T* data_as() const {
    return static_cast<const T*>(data());
  }
  /// A view of this tensor (valid while this Tensor or a copy of it lives).
  TensorView view();
  bool defined() const { return storage_ != nullptr || adopted_; }

 private:
  DataType dtype_ = DataType::kFloat32;
  Shape shape_;
  std::shared_ptr<std::vector<unsigned char>> storage_;
  std::shared_ptr<void> external_;  ///< adopt(): memory owned through its deleter
  Device device_;
  bool adopted_ = false;
};

}  // namespace hvd
