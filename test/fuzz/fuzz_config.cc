// Copyright horovod_cpp authors. Fuzz target: the parsing of the HOROVOD_* variables.
//
// Config::from_env reads every variable through a lookup; here each one gets a piece of the
// input (or is unset). Every value either parses within its documented range or is rejected
// with a message naming the variable; nothing crashes or overflows.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "common/config.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hvd::fuzz::FuzzInput in(data, size);
  std::map<std::string, std::string> seen;
  auto lookup = [&](const char* name) -> std::optional<std::string> {
    if (in.empty()) return std::nullopt;
    std::string v = in.piece();
    // C strings cannot hold a NUL: the environment never gives one.
    v = v.substr(0, v.find('\0'));
    seen[name] = v;
    return v;
  };
  hvd::Config c;
  hvd::Status st = hvd::Config::from_env(&c, lookup);
  if (!st.ok()) {
    // The message names one of the variables that were read.
    bool named = false;
    for (const auto& [name, value] : seen) named |= st.message().find(name) != std::string::npos;
    HVD_FUZZ_CHECK(named);
    return 0;
  }
  HVD_FUZZ_CHECK(c.fusion_threshold_bytes >= 0);
  HVD_FUZZ_CHECK(std::isfinite(c.cycle_time_ms) && c.cycle_time_ms >= 0);
  HVD_FUZZ_CHECK(c.cache_capacity >= 0 && c.cache_capacity <= UINT32_MAX);
  HVD_FUZZ_CHECK(std::isfinite(c.stall_check_seconds) && c.stall_check_seconds >= 0);
  HVD_FUZZ_CHECK(std::isfinite(c.stall_shutdown_seconds) && c.stall_shutdown_seconds >= 0);
  HVD_FUZZ_CHECK(c.shm_min_bytes >= 0 && c.shm_chunk_bytes >= 4096);
  HVD_FUZZ_CHECK(c.reduce_chunk_bytes >= 4096);
  HVD_FUZZ_CHECK(c.cuda_device >= -1 && c.cuda_device <= (1 << 20));
  HVD_FUZZ_CHECK(!c.describe().empty());
  return 0;
}
