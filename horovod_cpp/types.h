// Copyright horovod_cpp authors. Public API: element types, reduction operations and devices.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hvd {

/// Element type of a tensor. The numeric values are part of the wire format between ranks.
enum class DataType : uint8_t {
  kUInt8 = 0,
  kInt8 = 1,
  kInt16 = 2,
  kInt32 = 3,
  kInt64 = 4,
  kFloat16 = 5,   ///< IEEE 754 binary16; reduced on the CPU by accumulating in float.
  kBFloat16 = 6,  ///< bfloat16; reduced on the CPU by accumulating in float.
  kFloat32 = 7,
  kFloat64 = 8,
  kBool = 9,  ///< one byte per element, 0 or 1.
  kUInt16 = 10,  ///< unsigned 16-bit integers (Horovod's HOROVOD_UINT16).
};

/// The largest DataType value (for range checks of values read from other ranks or files).
constexpr DataType kLastDataType = DataType::kUInt16;

/// Size in bytes of one element of `dtype`.
std::size_t dtype_size(DataType dtype);

/// Lower-case name of `dtype` as used in error messages ("float32", "bfloat16", ...).
const char* dtype_name(DataType dtype);

/// True for float16, bfloat16, float32 and float64.
bool is_floating_point(DataType dtype);

/// Reduction applied by allreduce (and reducescatter).
enum class ReduceOp : uint8_t {
  kSum = 0,
  kAverage = 1,  ///< Sum divided by the number of ranks (integer types: truncated toward zero).
  kMin = 2,
  kMax = 3,
  kProduct = 4,
  /// Adaptive summation (Maleki et al., MLSys 2021): pairs of ranks' vectors combined as
  /// (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b in a binary tree over the set's ranks (any
  /// count), each tensor of a fused batch separately. Floating types, on CPU tensors and on
  /// CUDA tensors (combined on the host); docs/training.md, "Adasum".
  kAdasum = 5,
};

/// Lower-case name of `op` ("sum", "average", ...).
const char* reduce_op_name(ReduceOp op);

/// Where a tensor's memory lives.
struct Device {
  enum class Kind : uint8_t { kCPU = 0, kCUDA = 1 };
  Kind kind = Kind::kCPU;
  int index = -1;  ///< CUDA device ordinal; -1 for the CPU.

  /// The host.
  static Device cpu() { return Device{}; }
  /// CUDA device `ordinal`.
  static Device cuda(int ordinal) { return Device{Kind::kCUDA, ordinal}; }
  bool is_cpu() const { return kind == Kind::kCPU; }
  bool is_cuda() const { return kind == Kind::kCUDA; }
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  /// "cpu" or "cuda:N".
  std::string str() const;
};

}  // namespace hvd
