// Copyright horovod_cpp authors. float16/bfloat16 conversions (common/half.h) against the
// independent references of half_reference.h.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include <catch2/catch.hpp>

#include "common/half.h"
#include "half_reference.h"

using namespace hvd;
using namespace hvd::testing;

namespace {
uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
float float_of(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
}  // namespace

TEST_CASE("every float16 pattern decodes exactly and round-trips", "[half]") {
  int nans = 0;
  for (uint32_t p = 0; p < 65536; ++p) {
    const uint16_t h = static_cast<uint16_t>(p);
    const float f = fp16_to_float(h);
    const double ref = ref_half_value(h);
    INFO("pattern 0x" << std::hex << p);
    if (is_half_nan(h)) {
      ++nans;
      REQUIRE(std::isnan(f));
      const uint16_t back = float_to_fp16(f);
      REQUIRE(is_half_nan(back));
      REQUIRE((back & 0x8000) == (h & 0x8000));
      continue;
    }
    REQUIRE(static_cast<double>(f) == ref);
    REQUIRE(std::signbit(f) == std::signbit(ref));
    REQUIRE(float_to_fp16(f) == h);
  }
  CHECK(nans == 2 * 1023);
}

TEST_CASE("every bfloat16 pattern decodes exactly and round-trips", "[half]") {
  for (uint32_t p = 0; p < 65536; ++p) {
    const uint16_t b = static_cast<uint16_t>(p);
    const float f = bf16_to_float(b);
    INFO("pattern 0x" << std::hex << p);
    if (is_bf16_nan(b)) {
      REQUIRE(std::isnan(f));
      REQUIRE(is_bf16_nan(float_to_bf16(f)));
      REQUIRE((float_to_bf16(f) & 0x8000) == (b & 0x8000));
      continue;
    }
    REQUIRE(static_cast<double>(f) == ref_bf16_value(b));
    REQUIRE(std::signbit(f) == std::signbit(ref_bf16_value(b)));
    REQUIRE(float_to_bf16(f) == b);
  }
}

TEST_CASE("float to float16 rounds to nearest even, overflows to inf, underflows gradually",
          "[half]") {
  // Named cases: the edges of the format.
  CHECK(float_to_fp16(65504.0f) == 0x7BFF);
  CHECK(float_to_fp16(65519.99f) == 0x7BFF);
  CHECK(float_to_fp16(65520.0f) == 0x7C00);  // tie between max and 2^16: even = inf
  CHECK(float_to_fp16(-1e30f) == 0xFC00);
  CHECK(float_to_fp16(std::numeric_limits<float>::infinity()) == 0x7C00);
  CHECK(float_to_fp16(-std::numeric_limits<float>::infinity()) == 0xFC00);
  CHECK(is_half_nan(float_to_fp16(std::numeric_limits<float>::quiet_NaN())));
  CHECK(float_to_fp16(std::ldexp(1.0f, -24)) == 0x0001);      // smallest subnormal
  CHECK(float_to_fp16(std::ldexp(1.0f, -25)) == 0x0000);      // tie with 0: even = 0
  CHECK(float_to_fp16(std::ldexp(1.5f, -25)) == 0x0001);
  CHECK(float_to_fp16(std::ldexp(3.0f, -25)) == 0x0002);      // tie 1|2: even = 2
  CHECK(float_to_fp16(std::ldexp(5.0f, -25)) == 0x0002);      // tie 2|3: even = 2
  CHECK(float_to_fp16(std::ldexp(1.0f, -14)) == 0x0400);      // smallest normal
  CHECK(float_to_fp16(std::ldexp(1023.5f, -24)) == 0x0400);   // rounds up into the normals
  CHECK(float_to_fp16(-0.0f) == 0x8000);
  CHECK(float_to_fp16(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);  // tie: even = 1.0
  CHECK(float_to_fp16(1.0f + std::ldexp(3.0f, -11)) == 0x3C02);
  // Every midpoint between neighbouring halves and the floats right next to it.
  for (uint32_t p = 0; p < 0x7BFF; ++p) {
    const double mid = (ref_half_value(static_cast<uint16_t>(p)) +
                        ref_half_value(static_cast<uint16_t>(p + 1))) / 2;
    const float fm = static_cast<float>(mid);  // exact: 12 significant bits
    REQUIRE(static_cast<double>(fm) == mid);
    for (float f : {fm, std::nextafter(fm, 0.0f), std::nextafter(fm, 1e9f), -fm}) {
      INFO("f = " << f << " (0x" << std::hex << bits_of(f) << ")");
      REQUIRE(float_to_fp16(f) == ref_float_to_half(f));
    }
  }
  // Random floats of every magnitude.
  std::mt19937 rng(3);
  for (int i = 0; i < 300000; ++i) {
    const float f = float_of(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) continue;
    INFO("f = " << f << " (0x" << std::hex << bits_of(f) << ")");
    REQUIRE(float_to_fp16(f) == ref_float_to_half(f));
  }
  // And in the half range specifically.
  std::uniform_real_distribution<float> near(-70000.0f, 70000.0f);
  std::uniform_real_distribution<float> tiny(-1e-4f, 1e-4f);
  for (int i = 0; i < 200000; ++i) {
    const float f = i % 2 ? near(rng) : tiny(rng);
    REQUIRE(float_to_fp16(f) == ref_float_to_half(f));
  }
}

TEST_CASE("float to bfloat16 rounds to nearest even", "[half]") {
  CHECK(float_to_bf16(1.0f) == 0x3F80);
  CHECK(float_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);  // tie: even
  CHECK(float_to_bf16(1.0f + std::ldexp(3.0f, -8)) == 0x3F82);
  CHECK(float_to_bf16(std::numeric_limits<float>::max()) == 0x7F80);  // rounds past max
  CHECK(float_to_bf16(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK(float_to_bf16(-std::numeric_limits<float>::infinity()) == 0xFF80);
  CHECK(is_bf16_nan(float_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  CHECK(is_bf16_nan(float_to_bf16(float_of(0x7F800001u))));  // NaN with a low payload only
  CHECK(float_to_bf16(std::numeric_limits<float>::denorm_min()) == 0x0000);
  std::mt19937 rng(5);
  for (int i = 0; i < 500000; ++i) {
    const float f = float_of(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) continue;
    INFO("f = " << f << " (0x" << std::hex << bits_of(f) << ")");
    REQUIRE(float_to_bf16(f) == ref_float_to_bf16(f));
  }
}
