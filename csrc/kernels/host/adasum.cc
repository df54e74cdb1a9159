// Copyright horovod_cpp authors.
#include "kernels/host/adasum.h"

#include "common/half.h"

namespace hvd {
namespace {

// Reads and writes one element of T as double: plain types by cast, half types by their bits.
template <typename T>
struct Elem {
  using Type = T;
  static double get(const T* p, int64_t i) { return static_cast<double>(p[i]); }
  static void put(T* p, int64_t i, double v) { p[i] = static_cast<T>(v); }
};
struct Fp16 {
  using Type = uint16_t;
  static double get(const uint16_t* p, int64_t i) { return fp16_to_float(p[i]); }
  static void put(uint16_t* p, int64_t i, double v) { p[i] = float_to_fp16(static_cast<float>(v)); }
};
struct Bf16 {
  using Type = uint16_t;
  static double get(const uint16_t* p, int64_t i) { return bf16_to_float(p[i]); }
  static void put(uint16_t* p, int64_t i, double v) { p[i] = float_to_bf16(static_cast<float>(v)); }
};

template <typename E>
void partials_typed(const void* lower, const void* upper, int64_t n, double sums[3]) {
  const auto* a = static_cast<const typename E::Type*>(lower);
  const auto* b = static_cast<const typename E::Type*>(upper);
  double dot = 0.0, aa = 0.0, bb = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = E::get(a, i), y = E::get(b, i);
    dot += x * y;
    aa += x * x;
    bb += y * y;
  }
  sums[0] = dot;
  sums[1] = aa;
  sums[2] = bb;
}

template <typename E>
void blend_typed(void* out, const void* lower, const void* upper, int64_t n, double ca, double cb) {
  auto* o = static_cast<typename E::Type*>(out);
  const auto* a = static_cast<const typename E::Type*>(lower);
  const auto* b = static_cast<const typename E::Type*>(upper);
  for (int64_t i = 0; i < n; ++i) E::put(o, i, ca * E::get(a, i) + cb * E::get(b, i));
}

}  // namespace

int adasum_power_of_two(int ranks) {
  int p = 1;
  while (p <= ranks / 2) p *= 2;
  return p;
}

double adasum_coefficient(double dot, double norm2) {
  return norm2 > 0.0 ? 1.0 - dot / (2.0 * norm2) : 1.0;
}

void adasum_partials(const void* lower, const void* upper, int64_t count, DataType dtype,
                     double sums[3]) {
  switch (dtype) {
    case DataType::kFloat32:
      partials_typed<Elem<float>>(lower, upper, count, sums);
      break;
    case DataType::kFloat64:
      partials_typed<Elem<double>>(lower, upper, count, sums);
      break;
    case DataType::kFloat16:
      partials_typed<Fp16>(lower, upper, count, sums);
      break;
    case DataType::kBFloat16:
      partials_typed<Bf16>(lower, upper, count, sums);
      break;
    default:
      sums[0] = sums[1] = sums[2] = 0.0;
      break;  // refused at submission
  }
}

void adasum_blend(void* out, const void* lower, const void* upper, int64_t count, DataType dtype,
                  double c_lower, double c_upper) {
  switch (dtype) {
    case DataType::kFloat32:
      blend_typed<Elem<float>>(out, lower, upper, count, c_lower, c_upper);
      break;
    case DataType::kFloat64:
      blend_typed<Elem<double>>(out, lower, upper, count, c_lower, c_upper);
      break;
    case DataType::kFloat16:
      blend_typed<Fp16>(out, lower, upper, count, c_lower, c_upper);
      break;
    case DataType::kBFloat16:
      blend_typed<Bf16>(out, lower, upper, count, c_lower, c_upper);
      break;
    default:
      break;  // refused at submission (core/submission.h)
  }
}

void adasum_pair(void* a, const void* b, int64_t count, DataType dtype) {
  double s[3];
  adasum_partials(a, b, count, dtype, s);
  adasum_blend(a, a, b, count, dtype, adasum_coefficient(s[0], s[1]),
               adasum_coefficient(s[0], s[2]));
}

void adasum_tree(void* slots, int ranks, int64_t slot_bytes, const AdasumSegment* segments,
                 int64_t n_segments, DataType dtype) {
  unsigned char* base = static_cast<unsigned char*>(slots);
  auto combine = [&](int i, int j) {  // slot j into slot i, segment by segment
    unsigned char* a = base + static_cast<int64_t>(i) * slot_bytes;
    const unsigned char* b = base + static_cast<int64_t>(j) * slot_bytes;
    for (int64_t k = 0; k < n_segments; ++k) {
      const int64_t off = segments[k].offset;
      adasum_pair(a + off, b + off, segments[k].count, dtype);
    }
  };
  const int p = adasum_power_of_two(ranks);
  for (int j = 0; p + j < ranks; ++j) combine(j, p + j);
  for (int d = 1; d < p; d *= 2) {
    for (int i = 0; i < p; i += 2 * d) combine(i, i + d);
  }
}

}  // namespace hvd
