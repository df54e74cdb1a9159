// Copyright horovod_cpp authors. Config::from_env through a fake environment.
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <catch2/catch.hpp>

#include "common/config.h"

using namespace hvd;

namespace {

using Env = std::map<std::string, std::string>;

Status load(const Env& env, Config* c) {
  return Config::from_env(c, [&](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

}  // namespace

TEST_CASE("config defaults with an empty environment", "[config]") {
  Config c;
  c.fusion_threshold_bytes = -5;  // from_env must overwrite every field
  c.cache_capacity = -5;
  REQUIRE(load({}, &c).ok());
  CHECK(c.fusion_threshold_bytes == 64ll * 1024 * 1024);
  CHECK(c.cycle_time_ms == 1.0);
  CHECK(c.cache_capacity == 4096);
  CHECK(c.stall_check_seconds == 60.0);
  CHECK_FALSE(c.stall_check_disabled);
  CHECK(c.stall_shutdown_seconds == 0.0);
  CHECK(c.log_level == LogLevel::kWarning);
  CHECK(c.timeline_path.empty());
  CHECK_FALSE(c.timeline_mark_cycles);
  CHECK(c.reduce_chunk_bytes == 4ll * 1024 * 1024);
  CHECK(c.abort_grace_seconds == 5.0);
  CHECK(c.test_fake_version.empty());
  // Empty values count as unset.
  Config d;
  REQUIRE(load({{"HOROVOD_FUSION_THRESHOLD", ""}, {"HOROVOD_LOG_LEVEL", ""},
                {"HOROVOD_STALL_CHECK_DISABLE", ""}},
               &d)
              .ok());
  CHECK(d.fusion_threshold_bytes == 64ll * 1024 * 1024);
  CHECK(d.log_level == LogLevel::kWarning);
}

TEST_CASE("config parses every variable", "[config]") {
  Config c;
  REQUIRE(load({{"HOROVOD_FUSION_THRESHOLD", "0"},
                {"HOROVOD_CYCLE_TIME", "2.5"},
                {"HOROVOD_CACHE_CAPACITY", "7"},
                {"HOROVOD_STALL_CHECK_TIME_SECONDS", "12.25"},
                {"HOROVOD_STALL_CHECK_DISABLE", "1"},
                {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "300"},
                {"HOROVOD_LOG_LEVEL", "DEBUG"},
                {"HOROVOD_TIMELINE", "/tmp/t.json"},
                {"HOROVOD_TIMELINE_MARK_CYCLES", "true"},
                {"HOROVOD_CPP_REDUCE_CHUNK_BYTES", "1048576"},
                {"HOROVOD_CPP_ABORT_GRACE_SECONDS", "0"},
                {"HOROVOD_CPP_TEST_FAKE_VERSION", "9.9.9"}},
               &c)
              .ok());
  CHECK(c.abort_grace_seconds == 0.0);
  CHECK(c.test_fake_version == "9.9.9");
  CHECK(c.fusion_threshold_bytes == 0);
  CHECK(c.cycle_time_ms == 2.5);
  CHECK(c.cache_capacity == 7);
  CHECK(c.stall_check_seconds == 12.25);
  CHECK(c.stall_check_disabled);
  CHECK(c.stall_shutdown_seconds == 300.0);
  CHECK(c.log_level == LogLevel::kDebug);
  CHECK(c.timeline_path == "/tmp/t.json");
  CHECK(c.timeline_mark_cycles);
  CHECK(c.reduce_chunk_bytes == 1048576);

  Config d;
  REQUIRE(load({{"HOROVOD_FUSION_THRESHOLD", "123456789012"},
                {"HOROVOD_STALL_CHECK_DISABLE", "false"},
                {"HOROVOD_LOG_LEVEL", "error"},
                {"HOROVOD_CPP_REDUCE_CHUNK_BYTES", "10"}},
               &d)
              .ok());
  CHECK(d.fusion_threshold_bytes == 123456789012LL);
  CHECK_FALSE(d.stall_check_disabled);
  CHECK(d.log_level == LogLevel::kError);
  CHECK(d.reduce_chunk_bytes == 4096);  // raised to the minimum piece size
  for (const auto& [text, level] : std::map<std::string, LogLevel>{
           {"trace", LogLevel::kTrace}, {"info", LogLevel::kInfo},
           {"Warning", LogLevel::kWarning}, {"fatal", LogLevel::kFatal}}) {
    Config e;
    REQUIRE(load({{"HOROVOD_LOG_LEVEL", text}}, &e).ok());
    CHECK(e.log_level == level);
  }
}

TEST_CASE("elastic mode has no abort watchdog, whatever the grace says", "[config]") {
  Config c;
  REQUIRE(load({{"HOROVOD_ELASTIC", "1"}, {"HOROVOD_CPP_ABORT_GRACE_SECONDS", "30"}}, &c).ok());
  CHECK(c.abort_grace_seconds == 0.0);
  REQUIRE(load({{"HOROVOD_ELASTIC", "0"}, {"HOROVOD_CPP_ABORT_GRACE_SECONDS", "30"}}, &c).ok());
  CHECK(c.abort_grace_seconds == 30.0);
  CHECK_FALSE(load({{"HOROVOD_ELASTIC", "2"}}, &c).ok());
}

TEST_CASE("bad values are errors naming the variable and the value", "[config]") {
  const std::map<std::string, std::vector<std::string>> bad = {
      {"HOROVOD_FUSION_THRESHOLD", {"-1", "abc", "12MB", "1e6", "99999999999999999999"}},
      {"HOROVOD_CYCLE_TIME", {"-0.5", "fast", "nan", "1ms", "inf"}},
      {"HOROVOD_CACHE_CAPACITY", {"-3", "1.5", "x", "4294967296"}},
      {"HOROVOD_STALL_CHECK_TIME_SECONDS", {"-1", "never", "nan", "inf"}},
      {"HOROVOD_STALL_CHECK_DISABLE", {"yes", "2", "on"}},
      {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", {"-10", "soon"}},
      {"HOROVOD_LOG_LEVEL", {"verbose", "3"}},
      {"HOROVOD_TIMELINE_MARK_CYCLES", {"maybe"}},
      {"HOROVOD_CPP_REDUCE_CHUNK_BYTES", {"-4096", "4k"}},
      {"HOROVOD_CPP_ABORT_GRACE_SECONDS", {"-1", "later", "inf"}},
      // Over 1 TiB (the segment's size would wrap) or not a multiple of 64 (misaligned folds).
      {"HOROVOD_CPP_SHM_CHUNK_BYTES",
       {"9223372036854775807", "1099511627840", "-64", "4100", "1048577", "65632"}},
  };
  for (const auto& [var, values] : bad) {
    for (const auto& value : values) {
      INFO(var << "=" << value);
      Config c;
      const Status st = load({{var, value}}, &c);
      REQUIRE_FALSE(st.ok());
      CHECK(st.code() == ErrorCode::kInvalidArgument);
      CHECK_THAT(st.message(), Catch::Contains(var));
      CHECK_THAT(st.message(), Catch::Contains("'" + value + "'"));
    }
  }
}

TEST_CASE("shm chunk bytes: multiples of 64 up to 1 TiB are kept", "[config]") {
  for (const auto& [text, want] : std::map<std::string, int64_t>{
           {"4096", 4096}, {"65536", 65536}, {"1099511627776", 1099511627776LL},
           {"64", 4096}}) {  // below the 4 KiB minimum: raised to it
    INFO(text);
    Config c;
    REQUIRE(load({{"HOROVOD_CPP_SHM_CHUNK_BYTES", text}}, &c).ok());
    CHECK(c.shm_chunk_bytes == want);
  }
  Config c;
  const Status st = load({{"HOROVOD_CPP_SHM_CHUNK_BYTES", "4128"}}, &c);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.message(), Catch::Contains("a multiple of 64"));
  const Status big = load({{"HOROVOD_CPP_SHM_CHUNK_BYTES", "2199023255552"}}, &c);
  REQUIRE_FALSE(big.ok());
  CHECK_THAT(big.message(), Catch::Contains("[0, 1099511627776]"));
}

TEST_CASE("describe lists every variable", "[config]") {
  Config c;
  c.cache_capacity = 77;
  const std::string d = c.describe();
  for (const char* var : {"HOROVOD_FUSION_THRESHOLD", "HOROVOD_CYCLE_TIME",
                          "HOROVOD_CACHE_CAPACITY=77", "HOROVOD_STALL_CHECK_TIME_SECONDS",
                          "HOROVOD_STALL_CHECK_DISABLE", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS",
                          "HOROVOD_LOG_LEVEL", "HOROVOD_CPP_REDUCE_CHUNK_BYTES",
                          "HOROVOD_CPP_ABORT_GRACE_SECONDS"}) {
    CHECK_THAT(d, Catch::Contains(var));
  }
}
