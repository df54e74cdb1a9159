// Copyright horovod_cpp authors.
#include "kernels/host/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common/half.h"

namespace hvd {
namespace {

// out[i] = op(a[i], b[i]); `out` may be `a` (in place) but neither may overlap `b`.
template <typename T, typename Op>
void apply(T* out, const T* a, const T* __restrict b, int64_t n, Op op) {
  if (out == a) {
    T* __restrict io = out;
    for (int64_t i = 0; i < n; ++i) io[i] = op(io[i], b[i]);
  } else {
    T* __restrict o = out;
    const T* __restrict x = a;
    for (int64_t i = 0; i < n; ++i) o[i] = op(x[i], b[i]);
  }
}

// Integer sums and products wrap around (two's complement), like MPI's; computed in the
// unsigned type because signed overflow is undefined in C++.
template <typename T>
inline T wrap_add(T x, T y) {
  if constexpr (std::is_integral<T>::value) {
    using U = typename std::make_unsigned<T>::type;
    return static_cast<T>(static_cast<U>(static_cast<U>(x) + static_cast<U>(y)));
  } else {
    return static_cast<T>(x + y);
  }
}
template <typename T>
inline T wrap_mul(T x, T y) {
  if constexpr (std::is_integral<T>::value) {
    using U = typename std::make_unsigned<T>::type;
    using W = typename std::conditional<(sizeof(T) < sizeof(unsigned)), unsigned, U>::type;
    return static_cast<T>(static_cast<U>(static_cast<W>(static_cast<U>(x)) * static_cast<W>(static_cast<U>(y))));
  } else {
    return static_cast<T>(x * y);
  }
}

template <typename T>
void reduce_typed(T* out, const T* a, const T* b, int64_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage: apply(out, a, b, n, [](T x, T y) { return wrap_add(x, y); }); break;
    case ReduceOp::kMin: apply(out, a, b, n, [](T x, T y) { return std::min(x, y); }); break;
    case ReduceOp::kMax: apply(out, a, b, n, [](T x, T y) { return std::max(x, y); }); break;
    case ReduceOp::kProduct: apply(out, a, b, n, [](T x, T y) { return wrap_mul(x, y); }); break;
    case ReduceOp::kAdasum: break;  // not elementwise: kernels/host/adasum.h
  }
}

// Half types: convert, reduce in float, round back. Blocked so the float staging stays in L1.
template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void reduce_half(uint16_t* out, const uint16_t* a, const uint16_t* b, int64_t n, ReduceOp op) {
  constexpr int64_t kBlock = 256;
  float fa[kBlock], fb[kBlock];
  for (int64_t base = 0; base < n; base += kBlock) {
    const int64_t m = std::min(kBlock, n - base);
    for (int64_t i = 0; i < m; ++i) {
      fa[i] = ToF(a[base + i]);
      fb[i] = ToF(b[base + i]);
    }
    reduce_typed(fa, fa, fb, m, op);
    for (int64_t i = 0; i < m; ++i) out[base + i] = FromF(fa[i]);
  }
}

void reduce_bool(uint8_t* out, const uint8_t* a, const uint8_t* b, int64_t n, ReduceOp op) {
  // Sum and Max are logical or; Product and Min are logical and.
  if (op == ReduceOp::kSum || op == ReduceOp::kMax || op == ReduceOp::kAverage) {
    apply(out, a, b, n, [](uint8_t x, uint8_t y) { return static_cast<uint8_t>((x | y) != 0); });
  } else {
    apply(out, a, b, n, [](uint8_t x, uint8_t y) { return static_cast<uint8_t>(x && y); });
  }
}

}  // namespace

void reduce_to(void* out, const void* a, const void* b, int64_t n, DataType dtype, ReduceOp op) {
  switch (dtype) {
#define HVD_REDUCE_CASE(K, T)                                                                      \
  case DataType::K:                                                                               \
    reduce_typed(static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), n, op); \
    break;
    HVD_REDUCE_CASE(kUInt8, uint8_t)
    HVD_REDUCE_CASE(kInt8, int8_t)
    HVD_REDUCE_CASE(kInt16, int16_t)
    HVD_REDUCE_CASE(kUInt16, uint16_t)
    HVD_REDUCE_CASE(kInt32, int32_t)
    HVD_REDUCE_CASE(kInt64, int64_t)
    HVD_REDUCE_CASE(kFloat32, float)
    HVD_REDUCE_CASE(kFloat64, double)
#undef HVD_REDUCE_CASE
    case DataType::kFloat16:
      reduce_half<fp16_to_float, float_to_fp16>(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(a),
                                                static_cast<const uint16_t*>(b), n, op);
      break;
    case DataType::kBFloat16:
      reduce_half<bf16_to_float, float_to_bf16>(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(a),
                                                static_cast<const uint16_t*>(b), n, op);
      break;
    case DataType::kBool:
      reduce_bool(static_cast<uint8_t*>(out), static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(b), n, op);
      break;
  }
}

namespace {
template <typename T>
void reduce_scaled_typed(T* out, const T* a, const T* b, int64_t n, ReduceOp op, T f) {
  // Each lambda rounds op(x, y) to T before the product, as the two passes do.
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage: apply(out, a, b, n, [f](T x, T y) { return static_cast<T>(x + y) * f; }); break;
    case ReduceOp::kMin: apply(out, a, b, n, [f](T x, T y) { return std::min(x, y) * f; }); break;
    case ReduceOp::kMax: apply(out, a, b, n, [f](T x, T y) { return std::max(x, y) * f; }); break;
    case ReduceOp::kProduct: apply(out, a, b, n, [f](T x, T y) { return static_cast<T>(x * y) * f; }); break;
    case ReduceOp::kAdasum: break;  // not elementwise: kernels/host/adasum.h
  }
}
}  // namespace

bool reduce_scaled_to(void* out, const void* a, const void* b, int64_t n, DataType dtype,
                      ReduceOp op, double factor) {
  if (dtype == DataType::kFloat32) {
    reduce_scaled_typed(static_cast<float*>(out), static_cast<const float*>(a),
                        static_cast<const float*>(b), n, op, static_cast<float>(factor));
    return true;
  }
  if (dtype == DataType::kFloat64) {
    reduce_scaled_typed(static_cast<double*>(out), static_cast<const double*>(a),
                        static_cast<const double*>(b), n, op, factor);
    return true;
  }
  return false;
}

void reduce_into(void* inout, const void* in, int64_t n, DataType dtype, ReduceOp op) {
  reduce_to(inout, inout, in, n, dtype, op);
}

namespace {
// x * factor in double, truncated toward zero (as Horovod scales integer tensors); values
// outside the type wrap around like the integer sums do, NaN becomes 0.
template <typename T>
void scale_integers(T* p, int64_t n, double factor) {
  constexpr double kLimit = 9223372036854775807.0;  // 2^63
  for (int64_t i = 0; i < n; ++i) {
    const double v = std::trunc(static_cast<double>(p[i]) * factor);
    int64_t w = 0;
    if (v >= kLimit) {
      w = INT64_MAX;
    } else if (v <= -kLimit) {
      w = INT64_MIN;
    } else if (v == v) {
      w = static_cast<int64_t>(v);
    }
    using U = typename std::make_unsigned<T>::type;
    p[i] = static_cast<T>(static_cast<U>(static_cast<uint64_t>(w)));
  }
}
}  // namespace

void scale_buffer(void* data, int64_t n, DataType dtype, double factor) {
  if (factor == 1.0) return;
  switch (dtype) {
    case DataType::kFloat32: {
      float* p = static_cast<float*>(data);
      const float f = static_cast<float>(factor);
      for (int64_t i = 0; i < n; ++i) p[i] *= f;
      break;
    }
    case DataType::kFloat64: {
      double* p = static_cast<double*>(data);
      for (int64_t i = 0; i < n; ++i) p[i] *= factor;
      break;
    }
    case DataType::kFloat16: {
      uint16_t* p = static_cast<uint16_t*>(data);
      const float f = static_cast<float>(factor);
      for (int64_t i = 0; i < n; ++i) p[i] = float_to_fp16(fp16_to_float(p[i]) * f);
      break;
    }
    case DataType::kBFloat16: {
      uint16_t* p = static_cast<uint16_t*>(data);
      const float f = static_cast<float>(factor);
      for (int64_t i = 0; i < n; ++i) p[i] = float_to_bf16(bf16_to_float(p[i]) * f);
      break;
    }
    case DataType::kUInt8: scale_integers(static_cast<uint8_t*>(data), n, factor); break;
    case DataType::kInt8: scale_integers(static_cast<int8_t*>(data), n, factor); break;
    case DataType::kInt16: scale_integers(static_cast<int16_t*>(data), n, factor); break;
    case DataType::kUInt16: scale_integers(static_cast<uint16_t*>(data), n, factor); break;
    case DataType::kInt32: scale_integers(static_cast<int32_t*>(data), n, factor); break;
    case DataType::kInt64: scale_integers(static_cast<int64_t*>(data), n, factor); break;
    case DataType::kBool:
      break;  // rejected at submission: bool tensors take no scale factors
  }
}

namespace {
template <typename T>
void divide_typed(T* p, int64_t n, int64_t d) {
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(static_cast<int64_t>(p[i]) / d);
}
}  // namespace

void divide_integers(void* data, int64_t n, DataType dtype, int64_t divisor) {
  switch (dtype) {
    case DataType::kUInt8: divide_typed(static_cast<uint8_t*>(data), n, divisor); break;
    case DataType::kInt8: divide_typed(static_cast<int8_t*>(data), n, divisor); break;
    case DataType::kInt16: divide_typed(static_cast<int16_t*>(data), n, divisor); break;
    case DataType::kUInt16: divide_typed(static_cast<uint16_t*>(data), n, divisor); break;
    case DataType::kInt32: divide_typed(static_cast<int32_t*>(data), n, divisor); break;
    case DataType::kInt64: divide_typed(static_cast<int64_t*>(data), n, divisor); break;
    default: break;
  }
}

void finish_reduction(void* data, int64_t n, DataType dtype, double scale, int64_t divisor) {
  if (is_floating_point(dtype) || scale != 1.0) {  // integers only when a postscale asks
    scale_buffer(data, n, dtype, scale);
  } else if (dtype != DataType::kBool && divisor > 1) {
    divide_integers(data, n, dtype, divisor);
  }
}

}  // namespace hvd
