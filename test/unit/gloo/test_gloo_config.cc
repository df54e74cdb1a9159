// Copyright horovod_cpp authors. GlooConfig: the Gloo controller's variables, read in one place.
#include <catch2/catch.hpp>
#include <map>

#include "common/config.h"

namespace hvd {
namespace testing {
namespace {

Status read(const std::map<std::string, std::string>& env, GlooConfig* out) {
  return GlooConfig::from_env(out, [&](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

}  // namespace

TEST_CASE("gloo config: defaults, the two switches and every variable", "[gloo]") {
  GlooConfig c;
  REQUIRE(read({}, &c).ok());
  CHECK_FALSE(c.enabled);
  CHECK(c.rank == -1);
  CHECK(c.timeout_seconds == 30.0);
  CHECK(c.op_timeout_seconds == 5.0);
  CHECK(c.direct_max_bytes == -1);  // chosen at init
  REQUIRE(read({{"HOROVOD_GLOO", "1"}}, &c).ok());
  CHECK(c.enabled);
  REQUIRE(read({{"HOROVOD_CONTROLLER", "gloo"}}, &c).ok());
  CHECK(c.enabled);
  REQUIRE(read({{"HOROVOD_CONTROLLER", "mpi"}}, &c).ok());
  CHECK_FALSE(c.enabled);
  REQUIRE(read({{"HOROVOD_GLOO", "1"},
                {"HOROVOD_GLOO_RENDEZVOUS_ADDR", "10.0.0.1"},
                {"HOROVOD_GLOO_RENDEZVOUS_PORT", "4242"},
                {"HOROVOD_CPP_RENDEZVOUS_SECRET", "ab12"},
                {"HOROVOD_RANK", "3"},
                {"HOROVOD_SIZE", "4"},
                {"HOROVOD_LOCAL_RANK", "1"},
                {"HOROVOD_LOCAL_SIZE", "2"},
                {"HOROVOD_CROSS_RANK", "1"},
                {"HOROVOD_CROSS_SIZE", "2"},
                {"HOROVOD_HOSTNAME", "h2"},
                {"HOROVOD_CPP_WORKER_ID", "h2:1"},
                {"HOROVOD_GLOO_IFACE", "eth1"},
                {"HOROVOD_GLOO_TIMEOUT_SECONDS", "12.5"},
                {"HOROVOD_CPP_GLOO_OP_TIMEOUT_SECONDS", "0.5"},
                {"HOROVOD_CPP_GLOO_DIRECT_MAX_BYTES", "65536"}},
               &c)
              .ok());
  CHECK(c.rendezvous_addr == "10.0.0.1");
  CHECK(c.rendezvous_port == 4242);
  CHECK(c.secret == "ab12");
  CHECK((c.rank == 3 && c.size == 4 && c.local_rank == 1 && c.local_size == 2 &&
         c.cross_rank == 1 && c.cross_size == 2));
  CHECK((c.hostname == "h2" && c.worker_id == "h2:1" && c.iface == "eth1"));
  CHECK(c.timeout_seconds == 12.5);
  CHECK(c.op_timeout_seconds == 0.5);
  CHECK(c.direct_max_bytes == 65536);
}

TEST_CASE("gloo config: elastic mode and its assignment timeout", "[gloo]") {
  GlooConfig c;
  REQUIRE(read({}, &c).ok());
  CHECK_FALSE(c.elastic);
  CHECK(c.elastic_timeout_seconds == 600.0);
  REQUIRE(read({{"HOROVOD_ELASTIC", "1"}, {"HOROVOD_ELASTIC_TIMEOUT", "2.5"}}, &c).ok());
  CHECK(c.elastic);
  CHECK(c.elastic_timeout_seconds == 2.5);
  CHECK(c.timeout_seconds == 30.0);  // connecting keeps its own timeout
  Status s = read({{"HOROVOD_ELASTIC_TIMEOUT", "0"}}, &c);
  CHECK(s.message().find("HOROVOD_ELASTIC_TIMEOUT='0' is not a finite number > 0") !=
        std::string::npos);
  s = read({{"HOROVOD_ELASTIC", "yes"}}, &c);
  CHECK(s.message().find("HOROVOD_ELASTIC='yes' is not 0 or 1") != std::string::npos);
}

TEST_CASE("gloo config: bad values name the variable", "[gloo]") {
  GlooConfig c;
  Status s = read({{"HOROVOD_CONTROLLER", "nccl"}}, &c);
  CHECK(s.message().find("HOROVOD_CONTROLLER='nccl' is not gloo or mpi") != std::string::npos);
  s = read({{"HOROVOD_GLOO_RENDEZVOUS_PORT", "70000"}}, &c);
  CHECK(s.message().find("HOROVOD_GLOO_RENDEZVOUS_PORT='70000'") != std::string::npos);
  s = read({{"HOROVOD_CPP_GLOO_OP_TIMEOUT_SECONDS", "0"}}, &c);
  CHECK(s.message().find("HOROVOD_CPP_GLOO_OP_TIMEOUT_SECONDS='0' is not a finite number > 0") !=
        std::string::npos);
  s = read({{"HOROVOD_CPP_RENDEZVOUS_SECRET", std::string(300, 'a')}}, &c);
  CHECK(s.message().find("at most 256") != std::string::npos);
  s = read({{"HOROVOD_CPP_GLOO_DIRECT_MAX_BYTES", "-5"}}, &c);
  CHECK(s.message().find("HOROVOD_CPP_GLOO_DIRECT_MAX_BYTES='-5'") != std::string::npos);
  s = read({{"HOROVOD_RANK", "-1"}}, &c);
  CHECK(s.code() == ErrorCode::kInvalidArgument);
}

}  // namespace testing
}  // namespace hvd
