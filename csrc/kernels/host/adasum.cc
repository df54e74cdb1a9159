// Copyright horovod_cpp authors.
#include "kernels/host/adasum.h"

#include "common/half.h"

namespace hvd {
namespace {

// Reads and writes one element of T as double: plain types by cast, half types by their bits.
template <typename T>
struct Elem {
  static double get(const T* p, int64_t i) { return static_cast<double>(p[i]); }
  static void put(T* p, int64_t i, double v) { p[i] = static_cast<T>(v); }
};
struct Fp16 {
  static double get(const uint16_t* p, int64_t i) { return fp16_to_float(p[i]); }
  static void put(uint16_t* p, int64_t i, double v) { p[i] = float_to_fp16(static_cast<float>(v)); }
};
struct Bf16 {
  static double get(const uint16_t* p, int64_t i) { return bf16_to_float(p[i]); }
  static void put(uint16_t* p, int64_t i, double v) { p[i] = float_to_bf16(static_cast<float>(v)); }
};

// The coefficient of a vector with squared norm `norm2` given the pair's dot product: a zero
// vector contributes nothing whatever its coefficient, so it takes 1 (the other vector then
// passes through unchanged, since their dot product is 0).
double coefficient(double dot, double norm2) {
  return norm2 > 0.0 ? 1.0 - dot / (2.0 * norm2) : 1.0;
}

template <typename T, typename E>
void pair_typed(T* a, const T* b, int64_t n) {
  double dot = 0.0, aa = 0.0, bb = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = E::get(a, i), y = E::get(b, i);
    dot += x * y;
    aa += x * x;
    bb += y * y;
  }
  const double ca = coefficient(dot, aa), cb = coefficient(dot, bb);
  for (int64_t i = 0; i < n; ++i) E::put(a, i, ca * E::get(a, i) + cb * E::get(b, i));
}

}  // namespace

void adasum_pair(void* a, const void* b, int64_t count, DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      pair_typed<float, Elem<float>>(static_cast<float*>(a), static_cast<const float*>(b), count);
      break;
    case DataType::kFloat64:
      pair_typed<double, Elem<double>>(static_cast<double*>(a), static_cast<const double*>(b),
                                       count);
      break;
    case DataType::kFloat16:
      pair_typed<uint16_t, Fp16>(static_cast<uint16_t*>(a), static_cast<const uint16_t*>(b), count);
      break;
    case DataType::kBFloat16:
      pair_typed<uint16_t, Bf16>(static_cast<uint16_t*>(a), static_cast<const uint16_t*>(b), count);
      break;
    default:
      break;  // refused at submission (core/submission.h)
  }
}

void adasum_tree(void* slots, int ranks, int64_t slot_bytes, const AdasumSegment* segments,
                 int64_t n_segments, DataType dtype) {
  unsigned char* base = static_cast<unsigned char*>(slots);
  for (int d = 1; d < ranks; d *= 2) {
    for (int i = 0; i + d < ranks; i += 2 * d) {
      unsigned char* a = base + static_cast<int64_t>(i) * slot_bytes;
      const unsigned char* b = base + static_cast<int64_t>(i + d) * slot_bytes;
      for (int64_t k = 0; k < n_segments; ++k) {
        const int64_t off = segments[k].offset;
        adasum_pair(a + off, b + off, segments[k].count, dtype);
      }
    }
  }
}

}  // namespace hvd
