// Copyright horovod_cpp authors. CPU kernels (kernels/host/cpu_ops.h): every dtype x every
// reduce op, element by element against references computed here in wider types.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/host/cpu_ops.h"
#include "common/half.h"
#include "half_reference.h"

using namespace hvd;
using namespace hvd::testing;

namespace {

constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kProduct};

// Exact reference in long double / __int128, then the target type's own conversion rule.
template <typename T>
T wrap_to(__int128 v) {
  // Modular reduction to T's width: what two's complement integer types do.
  const int bits = 8 * static_cast<int>(sizeof(T));
  const unsigned __int128 mask = (static_cast<unsigned __int128>(1) << bits) - 1;
  unsigned __int128 u = static_cast<unsigned __int128>(v) & mask;
  if (std::is_signed<T>::value && (u >> (bits - 1))) {
    return static_cast<T>(static_cast<__int128>(u) - (static_cast<__int128>(1) << bits));
  }
  return static_cast<T>(u);
}

template <typename T>
T int_ref(T a, T b, ReduceOp op) {
  const __int128 x = a, y = b;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage: return wrap_to<T>(x + y);
    case ReduceOp::kMin: return x < y ? a : b;
    case ReduceOp::kMax: return x > y ? a : b;
    case ReduceOp::kProduct: return wrap_to<T>(x * y);
    case ReduceOp::kAdasum: break;  // not an elementwise fold (kernels/host/adasum.*)
  }
  return 0;
}

double real_ref(double x, double y, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage: return x + y;
    case ReduceOp::kMin: return y < x ? y : x;
    case ReduceOp::kMax: return x < y ? y : x;
    case ReduceOp::kProduct: return x * y;
    case ReduceOp::kAdasum: break;  // not an elementwise fold (kernels/host/adasum.*)
  }
  return 0;
}

template <typename T>
void check_int(DataType dt, T lo, T hi) {
  std::mt19937_64 rng(static_cast<uint64_t>(dt) * 977);
  const int64_t n = 1000;
  for (ReduceOp op : kOps) {
    INFO(dtype_name(dt) << " " << reduce_op_name(op));
    std::uniform_int_distribution<int64_t> d(static_cast<int64_t>(lo), static_cast<int64_t>(hi));
    std::vector<T> a(n), b(n);
    for (int64_t i = 0; i < n; ++i) {
      a[static_cast<size_t>(i)] = static_cast<T>(d(rng));
      b[static_cast<size_t>(i)] = static_cast<T>(d(rng));
    }
    a[0] = lo;  // the extremes are always present
    b[0] = hi;
    a[1] = hi;
    b[1] = hi;
    std::vector<T> out = a;
    reduce_into(out.data(), b.data(), n, dt, op);
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = static_cast<size_t>(i);
      INFO("element " << i << ": " << +a[k] << ", " << +b[k]);
      REQUIRE(+out[k] == +int_ref<T>(a[k], b[k], op));
    }
  }
}

}  // namespace

TEST_CASE("integer reductions", "[cpu_ops]") {
  // 8 and 16 bit: the full range, results wrap like the type. 32/64 bit: a range whose sums and
  // products fit (signed overflow there would be undefined behaviour in any kernel).
  check_int<uint8_t>(DataType::kUInt8, 0, 255);
  check_int<int8_t>(DataType::kInt8, -128, 127);
  check_int<int16_t>(DataType::kInt16, -32768, 32767);
  check_int<uint16_t>(DataType::kUInt16, 0, 65535);  // min/max unsigned: 40000 > 100
  check_int<int32_t>(DataType::kInt32, -46000, 46000);
  check_int<int64_t>(DataType::kInt64, -3000000000LL, 3000000000LL);
}

TEST_CASE("float32 and float64 reductions", "[cpu_ops]") {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> d(-1e3, 1e3);
  const int64_t n = 777;
  for (ReduceOp op : kOps) {
    INFO(reduce_op_name(op));
    std::vector<float> af(n), bf(n);
    std::vector<double> ad(n), bd(n);
    for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
      af[i] = static_cast<float>(d(rng));
      bf[i] = static_cast<float>(d(rng));
      ad[i] = d(rng);
      bd[i] = d(rng);
    }
    af[3] = bf[3] = 0.5f;  // equal operands
    auto of = af;
    auto od = ad;
    reduce_into(of.data(), bf.data(), n, DataType::kFloat32, op);
    reduce_into(od.data(), bd.data(), n, DataType::kFloat64, op);
    for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
      // float: the exact double result rounded once is the correctly rounded float result.
      REQUIRE(of[i] == static_cast<float>(real_ref(af[i], bf[i], op)));
      REQUIRE(od[i] == real_ref(ad[i], bd[i], op));
    }
  }
}

TEST_CASE("float16 and bfloat16 reductions equal rounding the exact result", "[cpu_ops]") {
  std::mt19937 rng(12);
  const int64_t n = 1300;  // several of the kernel's 256-element blocks plus a tail
  for (DataType dt : {DataType::kFloat16, DataType::kBFloat16}) {
    const bool half = dt == DataType::kFloat16;
    auto value = [&](uint16_t p) { return half ? ref_half_value(p) : ref_bf16_value(p); };
    auto round = [&](double x) { return half ? ref_float_to_half(x) : ref_float_to_bf16(x); };
    auto is_nan = [&](uint16_t p) { return half ? is_half_nan(p) : is_bf16_nan(p); };
    auto finite_random = [&] {
      for (;;) {
        const uint16_t p = static_cast<uint16_t>(rng());
        if (std::isfinite(value(p))) return p;
      }
    };
    for (ReduceOp op : kOps) {
      INFO(dtype_name(dt) << " " << reduce_op_name(op));
      std::vector<uint16_t> a(n), b(n);
      for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
        a[i] = finite_random();
        // Half the time a nearby magnitude, so sums and products stay in range and round.
        b[i] = i % 2 ? finite_random() : static_cast<uint16_t>((a[i] & 0xFF00) | (rng() & 0xFF));
        if (!std::isfinite(value(b[i]))) b[i] = a[i];
      }
      std::vector<uint16_t> out = a;
      reduce_into(out.data(), b.data(), n, dt, op);
      for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
        // The exact double result, rounded once (the float intermediate of the kernel is
        // wide enough that its double rounding never differs).
        const uint16_t expect = round(real_ref(value(a[i]), value(b[i]), op));
        INFO("element " << i << ": 0x" << std::hex << a[i] << " op 0x" << b[i] << " -> 0x"
                        << out[i] << ", expected 0x" << expect);
        if (is_nan(expect)) {
          REQUIRE(is_nan(out[i]));
        } else if (value(expect) == 0) {
          REQUIRE(value(out[i]) == 0);  // the sign of a zero min/max may be either
        } else {
          REQUIRE(out[i] == expect);
        }
      }
    }
  }
}

TEST_CASE("bool reductions are logical", "[cpu_ops]") {
  const uint8_t a[] = {0, 0, 1, 1};
  const uint8_t b[] = {0, 1, 0, 1};
  for (ReduceOp op : kOps) {
    INFO(reduce_op_name(op));
    uint8_t out[4];
    std::memcpy(out, a, 4);
    reduce_into(out, b, 4, DataType::kBool, op);
    const bool any = op == ReduceOp::kSum || op == ReduceOp::kAverage || op == ReduceOp::kMax;
    for (int i = 0; i < 4; ++i) {
      const bool expect = any ? (a[i] || b[i]) : (a[i] && b[i]);
      CHECK(out[i] == (expect ? 1 : 0));
    }
  }
}

TEST_CASE("n = 0 touches nothing", "[cpu_ops]") {
  float a = 1.5f, b = 2.0f;
  reduce_into(&a, &b, 0, DataType::kFloat32, ReduceOp::kSum);
  CHECK(a == 1.5f);
  scale_buffer(&a, 0, DataType::kFloat32, 3.0);
  CHECK(a == 1.5f);
}

TEST_CASE("scale_buffer", "[cpu_ops]") {
  const double factor = 0.37;
  std::mt19937 rng(13);
  std::uniform_real_distribution<double> d(-500, 500);
  const size_t n = 600;
  std::vector<float> f(n);
  std::vector<double> g(n);
  std::vector<uint16_t> h(n), bf(n);
  for (size_t i = 0; i < n; ++i) {
    f[i] = static_cast<float>(d(rng));
    g[i] = d(rng);
    h[i] = ref_float_to_half(d(rng));
    bf[i] = ref_float_to_bf16(d(rng));
  }
  auto f2 = f;
  auto g2 = g;
  auto h2 = h;
  auto bf2 = bf;
  scale_buffer(f2.data(), static_cast<int64_t>(n), DataType::kFloat32, factor);
  scale_buffer(g2.data(), static_cast<int64_t>(n), DataType::kFloat64, factor);
  scale_buffer(h2.data(), static_cast<int64_t>(n), DataType::kFloat16, factor);
  scale_buffer(bf2.data(), static_cast<int64_t>(n), DataType::kBFloat16, factor);
  const double ff = static_cast<float>(factor);  // the documented float factor
  for (size_t i = 0; i < n; ++i) {
    REQUIRE(f2[i] == static_cast<float>(static_cast<double>(f[i]) * ff));
    REQUIRE(g2[i] == g[i] * factor);
    // Half types: rounding of the float product.
    REQUIRE(h2[i] == ref_float_to_half(static_cast<float>(ref_half_value(h[i]) * ff)));
    REQUIRE(bf2[i] == ref_float_to_bf16(static_cast<float>(ref_bf16_value(bf[i]) * ff)));
  }
  // Factor 1 leaves the data alone.
  auto f3 = f;
  scale_buffer(f3.data(), static_cast<int64_t>(n), DataType::kFloat32, 1.0);
  CHECK(f3 == f);
}

TEST_CASE("scale_buffer on integers: in double, truncated toward zero", "[cpu_ops]") {
  std::vector<int32_t> a = {1, -2, 3, -3, 7, 0, 2147483647};
  scale_buffer(a.data(), static_cast<int64_t>(a.size()), DataType::kInt32, 0.5);
  CHECK(a == std::vector<int32_t>{0, -1, 1, -1, 3, 0, 1073741823});
  std::vector<int64_t> b = {10, -10, 4000000000LL, 3};
  scale_buffer(b.data(), 4, DataType::kInt64, 0.3);  // 10 * 0.3 = 3.0000000000000004
  CHECK(b == std::vector<int64_t>{3, -3, 1200000000, 0});
  std::vector<int8_t> c = {-5, 5, 60, 100};
  scale_buffer(c.data(), 4, DataType::kInt8, 1.5);  // 150 does not fit: wraps like sums do
  CHECK(c == std::vector<int8_t>{-7, 7, 90, static_cast<int8_t>(150 - 256)});
  std::vector<uint8_t> d = {255, 3, 10};
  scale_buffer(d.data(), 3, DataType::kUInt8, 0.25);
  CHECK(d == std::vector<uint8_t>{63, 0, 2});
  std::vector<int16_t> e = {-32768, 1000, -1};
  scale_buffer(e.data(), 3, DataType::kInt16, 2.5);
  CHECK(e == std::vector<int16_t>{-16384, 2500, -2});  // -81920 wraps to -16384
  std::vector<uint16_t> u = {65535, 40000, 3};
  scale_buffer(u.data(), 3, DataType::kUInt16, 0.5);
  CHECK(u == std::vector<uint16_t>{32767, 20000, 1});
  uint8_t flags[2] = {1, 0};  // bool: never scaled (rejected at submission)
  scale_buffer(flags, 2, DataType::kBool, 3.0);
  CHECK(flags[0] == 1);
  CHECK(flags[1] == 0);
}

TEST_CASE("divide_integers truncates toward zero", "[cpu_ops]") {
  std::vector<int32_t> a = {7, -7, 8, -8, 0, 1, -1, 2147483647, -2147483647 - 1};
  divide_integers(a.data(), static_cast<int64_t>(a.size()), DataType::kInt32, 2);
  CHECK(a == std::vector<int32_t>{3, -3, 4, -4, 0, 0, 0, 1073741823, -1073741824});
  std::vector<int8_t> b = {-128, 127, -5, 5, -3};
  divide_integers(b.data(), 5, DataType::kInt8, 3);
  CHECK(b == std::vector<int8_t>{-42, 42, -1, 1, -1});
  std::vector<uint8_t> c = {255, 200, 2};
  divide_integers(c.data(), 3, DataType::kUInt8, 3);
  CHECK(c == std::vector<uint8_t>{85, 66, 0});
  std::vector<int64_t> d = {std::numeric_limits<int64_t>::min(), -9, 9000000000000000001LL};
  divide_integers(d.data(), 3, DataType::kInt64, 4);
  CHECK(d == std::vector<int64_t>{-2305843009213693952LL, -2, 2250000000000000000LL});
  std::vector<int16_t> e = {-32768, 32767, -100};
  divide_integers(e.data(), 3, DataType::kInt16, 7);
  CHECK(e == std::vector<int16_t>{-4681, 4681, -14});
  std::vector<uint16_t> u = {65535, 40000, 6};
  divide_integers(u.data(), 3, DataType::kUInt16, 7);
  CHECK(u == std::vector<uint16_t>{9362, 5714, 0});  // as unsigned, not as int16
  // Against trunc() on many values.
  std::mt19937 rng(14);
  std::vector<int32_t> r(1000);
  for (auto& x : r) x = static_cast<int32_t>(rng());
  for (int64_t div : {3, 4, 7, 1000}) {
    auto q = r;
    divide_integers(q.data(), static_cast<int64_t>(q.size()), DataType::kInt32, div);
    for (size_t i = 0; i < r.size(); ++i) {
      REQUIRE(q[i] == static_cast<int32_t>(std::trunc(static_cast<double>(r[i]) / div)));
    }
  }
}

TEST_CASE("reduce_to equals a copy then reduce_into, inputs untouched, every dtype and op",
          "[cpu_ops]") {
  const DataType dtypes[] = {DataType::kUInt8,   DataType::kInt8,    DataType::kInt16,
                             DataType::kInt32,   DataType::kInt64,   DataType::kFloat16,
                             DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64,
                             DataType::kBool,    DataType::kUInt16};
  std::mt19937 rng(5);
  const int64_t n = 1031;  // not a multiple of any vector width nor of the half-type block
  for (DataType dt : dtypes) {
    const size_t bytes = static_cast<size_t>(n) * dtype_size(dt);
    std::vector<unsigned char> a(bytes), b(bytes);
    // Random bytes, made finite for floats (sign and a small exponent per element).
    for (size_t i = 0; i < bytes; ++i) {
      a[i] = static_cast<unsigned char>(rng());
      b[i] = static_cast<unsigned char>(rng());
    }
    auto tame = [&](std::vector<unsigned char>& v) {
      for (int64_t i = 0; i < n; ++i) {
        const size_t k = static_cast<size_t>(i);
        if (dt == DataType::kFloat32) {
          float f = std::ldexp(1.0f + static_cast<float>(v[k * 4] % 100) / 128.0f, v[k * 4 + 1] % 16 - 8);
          std::memcpy(&v[k * 4], &f, 4);
        } else if (dt == DataType::kFloat64) {
          double f = std::ldexp(1.0 + static_cast<double>(v[k * 8] % 100) / 128.0, v[k * 8 + 1] % 16 - 8);
          std::memcpy(&v[k * 8], &f, 8);
        } else if (dt == DataType::kFloat16 || dt == DataType::kBFloat16) {
          v[k * 2 + 1] = static_cast<unsigned char>((v[k * 2 + 1] & 0x83) | 0x30);  // exponent mid-range
        } else if (dt == DataType::kBool) {
          v[k] = v[k] & 1;
        }
      }
    };
    tame(a);
    tame(b);
    const auto a0 = a, b0 = b;
    for (ReduceOp op : kOps) {
      INFO(dtype_name(dt) << " " << reduce_op_name(op));
      std::vector<unsigned char> want = a, got(bytes, 0xEE);
      reduce_into(want.data(), b.data(), n, dt, op);
      reduce_to(got.data(), a.data(), b.data(), n, dt, op);
      CHECK(got == want);
      CHECK(a == a0);
      CHECK(b == b0);
      std::vector<unsigned char> inplace = a;  // out == a is allowed
      reduce_to(inplace.data(), inplace.data(), b.data(), n, dt, op);
      CHECK(inplace == want);
    }
  }
}

// The shm allreduce's last reduction and its Average/postscale run as one pass: the result must
// be the two passes' bit for bit (every op, float32 and float64, in place and not), so a tensor
// reduced by the fused path equals one reduced by the unfused (n > 2 ranks, other dtypes).
TEST_CASE("reduce_scaled_to equals reduce_to then scale_buffer, bit for bit", "[cpu_ops]") {
  const size_t n = 1000;
  std::mt19937 rng(29);
  std::uniform_real_distribution<double> d(-1e3, 1e3);
  std::vector<float> fa(n), fb(n);
  std::vector<double> da(n), db(n);
  for (size_t i = 0; i < n; ++i) {
    fa[i] = static_cast<float>(d(rng));
    fb[i] = static_cast<float>(d(rng));
    da[i] = d(rng);
    db[i] = d(rng);
  }
  fa[7] = std::numeric_limits<float>::quiet_NaN();
  da[9] = std::numeric_limits<double>::infinity();
  const auto count = static_cast<int64_t>(n);
  for (ReduceOp op : kOps) {
    for (double factor : {0.5, 1.0 / 3.0, 0.1, 7.0}) {
      INFO("op " << static_cast<int>(op) << " factor " << factor);
      std::vector<float> fref(n), fout(n), fio = fa;
      reduce_to(fref.data(), fa.data(), fb.data(), count, DataType::kFloat32, op);
      scale_buffer(fref.data(), count, DataType::kFloat32, factor);
      REQUIRE(reduce_scaled_to(fout.data(), fa.data(), fb.data(), count, DataType::kFloat32, op, factor));
      REQUIRE(reduce_scaled_to(fio.data(), fio.data(), fb.data(), count, DataType::kFloat32, op, factor));
      CHECK(std::memcmp(fout.data(), fref.data(), n * sizeof(float)) == 0);
      CHECK(std::memcmp(fio.data(), fref.data(), n * sizeof(float)) == 0);
      std::vector<double> dref(n), dout(n);
      reduce_to(dref.data(), da.data(), db.data(), count, DataType::kFloat64, op);
      scale_buffer(dref.data(), count, DataType::kFloat64, factor);
      REQUIRE(reduce_scaled_to(dout.data(), da.data(), db.data(), count, DataType::kFloat64, op, factor));
      CHECK(std::memcmp(dout.data(), dref.data(), n * sizeof(double)) == 0);
    }
  }
  // Other dtypes are left to the two passes.
  std::vector<int32_t> ia(4, 3), ib(4, 5), iout(4, -1);
  CHECK_FALSE(reduce_scaled_to(iout.data(), ia.data(), ib.data(), 4, DataType::kInt32, ReduceOp::kSum, 0.5));
  CHECK(iout == std::vector<int32_t>(4, -1));
}

// The shared-memory allreduce and reducescatter fold every element through fold_reduction():
// for 2-4 operands, every op and the dtypes with and without the fused last pass, the result
// equals the plain sequence (reduce_to, reduce_into in operand order, finish_reduction) bit
// for bit.
TEST_CASE("fold_reduction equals reducing in order, then finishing", "[cpu_ops]") {
  const int64_t n = 300;
  std::mt19937 rng(31);
  std::uniform_int_distribution<int> d(-1000, 1000);
  auto fill = [&](std::vector<unsigned char>& v, DataType t) {
    v.resize(static_cast<size_t>(n) * dtype_size(t));
    for (int64_t i = 0; i < n; ++i) {
      const int r = d(rng);
      unsigned char* p = v.data() + i * static_cast<int64_t>(dtype_size(t));
      if (t == DataType::kFloat32) *reinterpret_cast<float*>(p) = static_cast<float>(r) / 7.0f;
      if (t == DataType::kFloat64) *reinterpret_cast<double*>(p) = r / 7.0;
      if (t == DataType::kInt32) *reinterpret_cast<int32_t*>(p) = r;
    }
  };
  for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kInt32}) {
    for (int ranks = 2; ranks <= 4; ++ranks) {
      std::vector<std::vector<unsigned char>> x(static_cast<size_t>(ranks));
      for (auto& v : x) fill(v, t);
      for (ReduceOp op : kOps) {
        for (double scale : {1.0, 0.25, 1.0 / 3.0}) {
          const int64_t divisor = op == ReduceOp::kAverage ? ranks : 1;
          INFO("dtype " << static_cast<int>(t) << " ranks " << ranks << " op " << static_cast<int>(op)
                        << " scale " << scale);
          std::vector<unsigned char> ref(x[0].size()), got = x[0];
          reduce_to(ref.data(), x[0].data(), x[1].data(), n, t, op);
          for (int j = 2; j < ranks; ++j) reduce_into(ref.data(), x[static_cast<size_t>(j)].data(), n, t, op);
          finish_reduction(ref.data(), n, t, scale, divisor);
          fold_reduction(got.data(), got.data(), x[1].data(),
                         [&](int j) { return x[static_cast<size_t>(j)].data(); }, ranks, n, t, op,
                         scale, divisor);
          CHECK(std::memcmp(got.data(), ref.data(), ref.size()) == 0);
        }
      }
    }
  }
}
