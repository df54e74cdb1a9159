// Copyright horovod_cpp authors. Helpers shared by the multi-rank tests.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "common/half.h"
#include "horovod_cpp/horovod_cpp.h"

namespace hvdtest {

/// Every wait in the tests has a deadline: a bug fails the test instead of hanging it.
constexpr auto kDeadline = std::chrono::seconds(60);

/// Waits for `h`; records a failure (not an abort, so every rank keeps the same control flow)
/// on timeout or error. Returns true on success.
inline bool wait_ok(const hvd::Handle& h) {
  try {
    if (!h.wait_for(std::chrono::duration_cast<std::chrono::milliseconds>(kDeadline))) {
      FAIL_CHECK("'" << h.name() << "' did not complete within the deadline");
      return false;
    }
    return true;
  } catch (const hvd::Error& e) {
    FAIL_CHECK("'" << h.name() << "' failed: " << e.what());
    return false;
  }
}

/// Runs hvd::init() for the scope of a test case and hvd::shutdown() after it.
struct Session {
  Session() { hvd::init(); }
  ~Session() { hvd::shutdown(); }
};

/// Sets environment variables for the next hvd::init() and restores them afterwards.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<std::string, std::string>> vars) : vars_(vars) {
    for (auto& [k, v] : vars_) setenv(k.c_str(), v.c_str(), 1);
  }
  ~ScopedEnv() {
    for (auto& [k, v] : vars_) unsetenv(k.c_str());
  }

 private:
  std::vector<std::pair<std::string, std::string>> vars_;
};

/// Byte buffer holding n elements of dtype, filled from doubles.
struct Buffer {
  hvd::DataType dtype;
  hvd::Shape shape;
  std::vector<unsigned char> bytes;

  Buffer(hvd::DataType d, hvd::Shape s)
      : dtype(d),
        shape(std::move(s)),
        bytes(static_cast<size_t>(hvd::num_elements(shape)) * hvd::dtype_size(d)) {}
  int64_t n() const { return hvd::num_elements(shape); }
  hvd::TensorView view() { return hvd::TensorView(bytes.data(), dtype, shape); }

  void set(int64_t i, double v) {
    void* p = bytes.data() + i * static_cast<int64_t>(hvd::dtype_size(dtype));
    switch (dtype) {
      case hvd::DataType::kUInt8: *static_cast<uint8_t*>(p) = static_cast<uint8_t>(v); break;
      case hvd::DataType::kInt8: *static_cast<int8_t*>(p) = static_cast<int8_t>(v); break;
      case hvd::DataType::kInt16: *static_cast<int16_t*>(p) = static_cast<int16_t>(v); break;
      case hvd::DataType::kUInt16: *static_cast<uint16_t*>(p) = static_cast<uint16_t>(v); break;
      case hvd::DataType::kInt32: *static_cast<int32_t*>(p) = static_cast<int32_t>(v); break;
      case hvd::DataType::kInt64: *static_cast<int64_t*>(p) = static_cast<int64_t>(v); break;
      case hvd::DataType::kFloat16: *static_cast<uint16_t*>(p) = hvd::float_to_fp16(static_cast<float>(v)); break;
      case hvd::DataType::kBFloat16: *static_cast<uint16_t*>(p) = hvd::float_to_bf16(static_cast<float>(v)); break;
      case hvd::DataType::kFloat32: *static_cast<float*>(p) = static_cast<float>(v); break;
      case hvd::DataType::kFloat64: *static_cast<double*>(p) = v; break;
      case hvd::DataType::kBool: *static_cast<uint8_t*>(p) = v != 0 ? 1 : 0; break;
    }
  }
  double get(int64_t i) const {
    const void* p = bytes.data() + i * static_cast<int64_t>(hvd::dtype_size(dtype));
    switch (dtype) {
      case hvd::DataType::kUInt8: return *static_cast<const uint8_t*>(p);
      case hvd::DataType::kInt8: return *static_cast<const int8_t*>(p);
      case hvd::DataType::kInt16: return *static_cast<const int16_t*>(p);
      case hvd::DataType::kUInt16: return *static_cast<const uint16_t*>(p);
      case hvd::DataType::kInt32: return *static_cast<const int32_t*>(p);
      case hvd::DataType::kInt64: return static_cast<double>(*static_cast<const int64_t*>(p));
      case hvd::DataType::kFloat16: return hvd::fp16_to_float(*static_cast<const uint16_t*>(p));
      case hvd::DataType::kBFloat16: return hvd::bf16_to_float(*static_cast<const uint16_t*>(p));
      case hvd::DataType::kFloat32: return *static_cast<const float*>(p);
      case hvd::DataType::kFloat64: return *static_cast<const double*>(p);
      case hvd::DataType::kBool: return *static_cast<const uint8_t*>(p);
    }
    return 0;
  }
};

inline const std::vector<hvd::DataType>& all_dtypes() {
  static const std::vector<hvd::DataType> v = {
      hvd::DataType::kUInt8,   hvd::DataType::kInt8,     hvd::DataType::kInt16,
      hvd::DataType::kInt32,   hvd::DataType::kInt64,    hvd::DataType::kFloat16,
      hvd::DataType::kBFloat16, hvd::DataType::kFloat32, hvd::DataType::kFloat64,
      hvd::DataType::kBool,    hvd::DataType::kUInt16};
  return v;
}

inline bool is_signed_dtype(hvd::DataType d) {
  return d != hvd::DataType::kUInt8 && d != hvd::DataType::kUInt16 && d != hvd::DataType::kBool;
}

}  // namespace hvdtest
