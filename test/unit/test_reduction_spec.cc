// Copyright horovod_cpp authors. The reduction spec (transport/batch.h): what every transport
// applies for Average, prescale and postscale, derived once by the executor. Checked against
// the rule written out here (Average = Sum then a division by the set size, folded into the
// postscale for floats; integers scale in double only with a postscale, else divide exactly),
// field by field and by the bits of whole reductions.
#include <cstdint>
#include <cstring>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/host/cpu_ops.h"
#include "transport/batch.h"

using namespace hvd;

namespace {

// Sums `n` ranks' inputs (rank r holds base[i] + r) the way a summing transport applies the
// spec: prescale each input, reduce, finish. Returns the result's bytes.
template <typename T>
std::vector<unsigned char> reduce_with_spec(const std::vector<T>& base, int n, DataType dtype,
                                            const ReductionSpec& spec) {
  std::vector<T> acc(base.size(), T(0)), in(base.size());
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < base.size(); ++i) in[i] = static_cast<T>(base[i] + static_cast<T>(r));
    scale_buffer(in.data(), static_cast<int64_t>(in.size()), dtype, spec.prescale);
    reduce_into(acc.data(), in.data(), static_cast<int64_t>(acc.size()), dtype, spec.op);
  }
  finish_reduction(acc.data(), static_cast<int64_t>(acc.size()), dtype, spec.scale, spec.divisor);
  std::vector<unsigned char> bytes(acc.size() * sizeof(T));
  std::memcpy(bytes.data(), acc.data(), bytes.size());
  return bytes;
}

// The same reduction with the rule spelled out step by step, as the CPU transport wrote it
// before the spec existed.
template <typename T>
std::vector<unsigned char> reduce_by_rule(const std::vector<T>& base, int n, DataType dtype,
                                          ReduceOp op, double pre, double post) {
  std::vector<T> acc(base.size(), T(0)), in(base.size());
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < base.size(); ++i) in[i] = static_cast<T>(base[i] + static_cast<T>(r));
    scale_buffer(in.data(), static_cast<int64_t>(in.size()), dtype, pre);
    reduce_into(acc.data(), in.data(), static_cast<int64_t>(acc.size()), dtype, op);
  }
  const int64_t count = static_cast<int64_t>(acc.size());
  if (is_floating_point(dtype) || post != 1.0) {
    double f = post;
    if (op == ReduceOp::kAverage) f /= static_cast<double>(n);
    scale_buffer(acc.data(), count, dtype, f);
  } else if (op == ReduceOp::kAverage && dtype != DataType::kBool) {
    divide_integers(acc.data(), count, dtype, n);
  }
  std::vector<unsigned char> bytes(acc.size() * sizeof(T));
  std::memcpy(bytes.data(), acc.data(), bytes.size());
  return bytes;
}

}  // namespace

TEST_CASE("reduction spec: floats fold Average into the postscale", "[reduction_spec]") {
  const ReductionSpec avg = make_reduction_spec(ReduceOp::kAverage, DataType::kFloat32, 0.5, 3.0, 3);
  CHECK(avg.op == ReduceOp::kAverage);
  CHECK(avg.prescale == 0.5);
  CHECK(avg.postscale == 3.0);
  CHECK(avg.scale == 3.0 / 3.0);
  CHECK(avg.divisor == 1);
  const ReductionSpec odd = make_reduction_spec(ReduceOp::kAverage, DataType::kFloat64, 1.0, 1.0, 7);
  CHECK(odd.scale == 1.0 / 7.0);
  CHECK(odd.divisor == 1);
  const ReductionSpec sum = make_reduction_spec(ReduceOp::kSum, DataType::kFloat16, 2.0, 0.25, 4);
  CHECK(sum.scale == 0.25);
  CHECK(sum.divisor == 1);
}

TEST_CASE("reduction spec: integers divide exactly unless a postscale asks", "[reduction_spec]") {
  const ReductionSpec exact = make_reduction_spec(ReduceOp::kAverage, DataType::kInt32, 1.0, 1.0, 4);
  CHECK(exact.scale == 1.0);
  CHECK(exact.divisor == 4);
  const ReductionSpec scaled = make_reduction_spec(ReduceOp::kAverage, DataType::kInt64, 1.0, 2.0, 4);
  CHECK(scaled.scale == 2.0 / 4.0);
  CHECK(scaled.divisor == 1);
  const ReductionSpec sum = make_reduction_spec(ReduceOp::kSum, DataType::kUInt8, 1.0, 1.0, 4);
  CHECK(sum.scale == 1.0);
  CHECK(sum.divisor == 1);
  const ReductionSpec max = make_reduction_spec(ReduceOp::kMax, DataType::kInt16, 3.0, 1.0, 2);
  CHECK(max.prescale == 3.0);
  CHECK(max.scale == 1.0);
  CHECK(max.divisor == 1);
  const ReductionSpec logical = make_reduction_spec(ReduceOp::kSum, DataType::kBool, 1.0, 1.0, 3);
  CHECK(logical.scale == 1.0);
  CHECK(logical.divisor == 1);
}

TEST_CASE("reduction spec: applying it gives the rule's bits", "[reduction_spec]") {
  const int n = GENERATE(1, 2, 3, 4, 7);
  const ReduceOp op = GENERATE(ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax);
  const double pre = GENERATE(1.0, 0.5, 3.0);
  const double post = GENERATE(1.0, 0.1, 2.0);
  CAPTURE(n, static_cast<int>(op), pre, post);
  const std::vector<float> f32 = {-7.25f, 0.0f, 1.0f / 3.0f, 1e6f, -3e-4f, 42.5f};
  CHECK(reduce_with_spec(f32, n, DataType::kFloat32,
                         make_reduction_spec(op, DataType::kFloat32, pre, post, n)) ==
        reduce_by_rule(f32, n, DataType::kFloat32, op, pre, post));
  const std::vector<double> f64 = {-7.25, 0.0, 1.0 / 3.0, 1e15, -3e-4, 42.5};
  CHECK(reduce_with_spec(f64, n, DataType::kFloat64,
                         make_reduction_spec(op, DataType::kFloat64, pre, post, n)) ==
        reduce_by_rule(f64, n, DataType::kFloat64, op, pre, post));
  const std::vector<int32_t> i32 = {-7, 0, 1, 1000003, -3, 41};
  CHECK(reduce_with_spec(i32, n, DataType::kInt32,
                         make_reduction_spec(op, DataType::kInt32, pre, post, n)) ==
        reduce_by_rule(i32, n, DataType::kInt32, op, pre, post));
  const std::vector<int64_t> i64 = {-7, 0, 1, INT64_C(1) << 40, -3, 41};
  CHECK(reduce_with_spec(i64, n, DataType::kInt64,
                         make_reduction_spec(op, DataType::kInt64, pre, post, n)) ==
        reduce_by_rule(i64, n, DataType::kInt64, op, pre, post));
}
