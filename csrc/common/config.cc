// Copyright horovod_cpp authors.
#include "common/config.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace hvd {
namespace {

using Lookup = std::function<std::optional<std::string>(const char*)>;

constexpr int64_t kMaxShmChunkBytes = 1ll << 40;  // 1 TiB

Status bad(const char* var, const std::string& value, const char* expected) {
  return Status::InvalidArgument(std::string("environment variable ") + var + "='" + value +
                                 "' is not " + expected);
}

Status read_double(const Lookup& lookup, const char* var, double min, double* out) {
  auto v = lookup(var);
  if (!v || v->empty()) return Status::OK();
  char* end = nullptr;
  errno = 0;
  double d = std::strtod(v->c_str(), &end);
  // Not inf: the values become timeouts, and an infinite one overflows the clock arithmetic.
  if (errno != 0 || end == v->c_str() || *end != '\0' || !(d >= min) || !std::isfinite(d)) {
    return bad(var, *v, min > 0 ? "a finite number > 0" : "a finite number >= 0");
  }
  *out = d;
  return Status::OK();
}

Status read_int(const Lookup& lookup, const char* var, int64_t* out, int64_t max = INT64_MAX) {
  auto v = lookup(var);
  if (!v || v->empty()) return Status::OK();
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v->c_str(), &end, 10);
  if (errno != 0 || end == v->c_str() || *end != '\0' || x < 0 || x > max) {
    const std::string range =
        max == INT64_MAX ? "an integer >= 0" : "an integer in [0, " + std::to_string(max) + "]";
    return bad(var, *v, range.c_str());
  }
  *out = x;
  return Status::OK();
}

Status read_bool(const Lookup& lookup, const char* var, bool* out) {
  auto v = lookup(var);
  if (!v || v->empty()) return Status::OK();
  if (*v == "1" || *v == "true" || *v == "TRUE" || *v == "True") {
    *out = true;
  } else if (*v == "0" || *v == "false" || *v == "FALSE" || *v == "False") {
    *out = false;
  } else {
    return bad(var, *v, "0 or 1");
  }
  return Status::OK();
}

Lookup or_getenv(const Lookup& lookup) {
  if (lookup) return lookup;
  return [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

}  // namespace

Status GlooConfig::from_env(GlooConfig* out, const Lookup& lookup_in) {
  const Lookup lookup = or_getenv(lookup_in);
  GlooConfig c;
  HVD_RETURN_IF_ERROR(read_bool(lookup, "HOROVOD_GLOO", &c.enabled));
  if (auto v = lookup("HOROVOD_CONTROLLER"); v && !v->empty()) {
    if (*v == "gloo") {
      c.enabled = true;
    } else if (*v != "mpi") {
      return bad("HOROVOD_CONTROLLER", *v, "gloo or mpi");
    }
  }
  if (auto v = lookup("HOROVOD_GLOO_RENDEZVOUS_ADDR"); v) c.rendezvous_addr = *v;
  HVD_RETURN_IF_ERROR(read_int(lookup, "HOROVOD_GLOO_RENDEZVOUS_PORT", &c.rendezvous_port, 65535));
  if (auto v = lookup("HOROVOD_CPP_RENDEZVOUS_SECRET"); v) c.secret = *v;
  const std::pair<const char*, int64_t*> places[] = {{"HOROVOD_RANK", &c.rank},
                                                     {"HOROVOD_SIZE", &c.size},
                                                     {"HOROVOD_LOCAL_RANK", &c.local_rank},
                                                     {"HOROVOD_LOCAL_SIZE", &c.local_size},
                                                     {"HOROVOD_CROSS_RANK", &c.cross_rank},
                                                     {"HOROVOD_CROSS_SIZE", &c.cross_size}};
  for (const auto& p : places) HVD_RETURN_IF_ERROR(read_int(lookup, p.first, p.second, 1 << 24));
  if (auto v = lookup("HOROVOD_HOSTNAME"); v) c.hostname = *v;
  if (auto v = lookup("HOROVOD_CPP_WORKER_ID"); v) c.worker_id = *v;
  if (auto v = lookup("HOROVOD_GLOO_IFACE"); v) c.iface = *v;
  HVD_RETURN_IF_ERROR(
      read_double(lookup, "HOROVOD_GLOO_TIMEOUT_SECONDS", 0.001, &c.timeout_seconds));
  HVD_RETURN_IF_ERROR(
      read_double(lookup, "HOROVOD_CPP_GLOO_OP_TIMEOUT_SECONDS", 0.001, &c.op_timeout_seconds));
  HVD_RETURN_IF_ERROR(
      read_int(lookup, "HOROVOD_CPP_GLOO_DIRECT_MAX_BYTES", &c.direct_max_bytes, int64_t{1} << 32));
  HVD_RETURN_IF_ERROR(read_bool(lookup, "HOROVOD_ELASTIC", &c.elastic));
  HVD_RETURN_IF_ERROR(
      read_double(lookup, "HOROVOD_ELASTIC_TIMEOUT", 0.001, &c.elastic_timeout_seconds));
  if (c.secret.size() > 256) {
    return bad("HOROVOD_CPP_RENDEZVOUS_SECRET", "<" + std::to_string(c.secret.size()) + " chars>",
               "at most 256 characters");
  }
  *out = c;
  return Status::OK();
}

Status Config::from_env(Config* out, const Lookup& lookup_in) {
  const Lookup lookup = or_getenv(lookup_in);
  Config c;
  HVD_RETURN_IF_ERROR(read_int(lookup, "HOROVOD_FUSION_THRESHOLD", &c.fusion_threshold_bytes));
  HVD_RETURN_IF_ERROR(read_double(lookup, "HOROVOD_CYCLE_TIME", 0.0, &c.cycle_time_ms));
  // The controller holds the capacity in 32 bits: larger values would silently wrap (2^32 to 0,
  // which disables the cache).
  HVD_RETURN_IF_ERROR(read_int(lookup, "HOROVOD_CACHE_CAPACITY", &c.cache_capacity, UINT32_MAX));
  HVD_RETURN_IF_ERROR(
      read_double(lookup, "HOROVOD_STALL_CHECK_TIME_SECONDS", 0.0, &c.stall_check_seconds));
  HVD_RETURN_IF_ERROR(read_bool(lookup, "HOROVOD_STALL_CHECK_DISABLE", &c.stall_check_disabled));
  HVD_RETURN_IF_ERROR(
      read_double(lookup, "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", 0.0, &c.stall_shutdown_seconds));
  HVD_RETURN_IF_ERROR(read_int(lookup, "HOROVOD_CPP_REDUCE_CHUNK_BYTES", &c.reduce_chunk_bytes));
  HVD_RETURN_IF_ERROR(read_int(lookup, "HOROVOD_CPP_BUFFER_CACHE_BYTES", &c.buffer_cache_bytes));
  HVD_RETURN_IF_ERROR(read_bool(lookup, "HOROVOD_CPP_HUGE_PAGES", &c.huge_pages));
  HVD_RETURN_IF_ERROR(
      read_double(lookup, "HOROVOD_CPP_ABORT_GRACE_SECONDS", 0.0, &c.abort_grace_seconds));
  // Elastic mode: a lost peer is the program's to handle (restore, re-init) and the driver's
  // to act on, never a watchdog's (GlooConfig::elastic reads the same variable).
  bool elastic = false;
  HVD_RETURN_IF_ERROR(read_bool(lookup, "HOROVOD_ELASTIC", &elastic));
  if (elastic) c.abort_grace_seconds = 0.0;
  if (auto v = lookup("HOROVOD_CPP_TEST_FAKE_VERSION"); v) c.test_fake_version = *v;
  if (auto v = lookup("HOROVOD_CPP_TEST_CORRUPT_RESPONSE"); v) c.test_corrupt_response = *v;
  HVD_RETURN_IF_ERROR(
      read_bool(lookup, "HOROVOD_CPP_TEST_EXIT_AFTER_CONNECT", &c.test_exit_after_connect));
  HVD_RETURN_IF_ERROR(
      read_bool(lookup, "HOROVOD_HIERARCHICAL_ALLREDUCE", &c.hierarchical_allreduce));
  HVD_RETURN_IF_ERROR(read_int(lookup, "HOROVOD_CPP_CUDA_DEVICE", &c.cuda_device, 1 << 20));
  HVD_RETURN_IF_ERROR(read_bool(lookup, "NCCL_MULTI_RANK_GPU_ENABLE", &c.nccl_multi_rank_gpu));
  HVD_RETURN_IF_ERROR(
      read_double(lookup, "HOROVOD_CPP_NCCL_TIMEOUT_SECONDS", 0.0, &c.nccl_timeout_seconds));
  HVD_RETURN_IF_ERROR(read_bool(lookup, "HOROVOD_CPP_SHM", &c.shm_enabled));
  HVD_RETURN_IF_ERROR(read_bool(lookup, "HOROVOD_CPP_SHM_CONTROL", &c.shm_control));
  HVD_RETURN_IF_ERROR(read_int(lookup, "HOROVOD_CPP_SHM_MIN_BYTES", &c.shm_min_bytes));
  // Bounded so that the segment's size (2 chunks + a header) cannot wrap, and a multiple of
  // 64 so that every slot and round in it starts aligned for the typed folds (and on a line).
  HVD_RETURN_IF_ERROR(
      read_int(lookup, "HOROVOD_CPP_SHM_CHUNK_BYTES", &c.shm_chunk_bytes, kMaxShmChunkBytes));
  if (c.shm_chunk_bytes % 64 != 0) {
    // Only a set value can be off: the default is a multiple.
    return bad("HOROVOD_CPP_SHM_CHUNK_BYTES", lookup("HOROVOD_CPP_SHM_CHUNK_BYTES").value_or(""),
               "a multiple of 64");
  }
  HVD_RETURN_IF_ERROR(
      read_int(lookup, "HOROVOD_CPP_SHM_GATHER_MAX_BYTES", &c.shm_gather_max_bytes));
  HVD_RETURN_IF_ERROR(
      read_int(lookup, "HOROVOD_CPP_SHM_SINGLE_COPY_BYTES", &c.shm_single_copy_bytes));
  HVD_RETURN_IF_ERROR(
      read_int(lookup, "HOROVOD_CPP_SHM_SINGLE_COPY_MAX_BYTES", &c.shm_single_copy_max_bytes));
  HVD_RETURN_IF_ERROR(
      read_int(lookup, "HOROVOD_CPP_SHM_MEASURED_MIN_BYTES", &c.shm_measured_min_bytes));
  HVD_RETURN_IF_ERROR(read_bool(lookup, "HOROVOD_CPP_TEST_SHM_PATH_VOTES", &c.test_shm_path_votes));
  HVD_RETURN_IF_ERROR(read_int(lookup, "HOROVOD_CPP_TEST_SHM_PATH", &c.test_shm_path, 2));
  HVD_RETURN_IF_ERROR(read_bool(lookup, "HOROVOD_CPP_SHM_HIERARCHICAL", &c.shm_hierarchical));
  HVD_RETURN_IF_ERROR(
      read_int(lookup, "HOROVOD_CPP_TEST_RANKS_PER_HOST", &c.test_ranks_per_host, 1 << 20));
  HVD_RETURN_IF_ERROR(
      read_bool(lookup, "HOROVOD_CPP_TEST_HOSTS_ROUND_ROBIN", &c.test_hosts_round_robin));
  if (c.shm_chunk_bytes < 4096) c.shm_chunk_bytes = 4096;
  if (auto v = lookup("HOROVOD_TIMELINE"); v) c.timeline_path = *v;
  HVD_RETURN_IF_ERROR(read_bool(lookup, "HOROVOD_TIMELINE_MARK_CYCLES", &c.timeline_mark_cycles));
  if (auto v = lookup("HOROVOD_LOG_LEVEL"); v && !v->empty()) {
    if (!parse_log_level(*v, &c.log_level)) {
      return bad("HOROVOD_LOG_LEVEL", *v, "one of trace, debug, info, warning, error, fatal");
    }
  }
  if (c.reduce_chunk_bytes < 4096) c.reduce_chunk_bytes = 4096;
  HVD_RETURN_IF_ERROR(read_bool(lookup, "HOROVOD_AUTOTUNE", &c.autotune));
  if (auto v = lookup("HOROVOD_AUTOTUNE_LOG"); v) c.autotune_log = *v;
  HVD_RETURN_IF_ERROR(
      read_int(lookup, "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", &c.autotune_warmup_samples, 1000));
  HVD_RETURN_IF_ERROR(
      read_int(lookup, "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", &c.autotune_steps_per_sample, 1000000));
  HVD_RETURN_IF_ERROR(read_int(lookup, "HOROVOD_CPP_AUTOTUNE_SAMPLES_PER_TRIAL",
                               &c.autotune_samples_per_trial, 1000));
  if (c.autotune_steps_per_sample < 1) c.autotune_steps_per_sample = 1;
  if (c.autotune_samples_per_trial < 1) c.autotune_samples_per_trial = 1;
  *out = c;
  return Status::OK();
}

std::string Config::describe() const {
  std::ostringstream os;
  os << "HOROVOD_FUSION_THRESHOLD=" << fusion_threshold_bytes
     << " HOROVOD_CYCLE_TIME=" << cycle_time_ms << " HOROVOD_CACHE_CAPACITY=" << cache_capacity
     << " HOROVOD_STALL_CHECK_TIME_SECONDS=" << stall_check_seconds
     << " HOROVOD_STALL_CHECK_DISABLE=" << stall_check_disabled
     << " HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=" << stall_shutdown_seconds
     << " HOROVOD_CPP_ABORT_GRACE_SECONDS=" << abort_grace_seconds
     << " HOROVOD_LOG_LEVEL=" << static_cast<int>(log_level) << " HOROVOD_CPP_SHM=" << shm_enabled
     << " HOROVOD_CPP_SHM_CONTROL=" << shm_control << " HOROVOD_CPP_SHM_MIN_BYTES=" << shm_min_bytes
     << " HOROVOD_CPP_SHM_CHUNK_BYTES=" << shm_chunk_bytes
     << " HOROVOD_CPP_SHM_GATHER_MAX_BYTES=" << shm_gather_max_bytes
     << " HOROVOD_CPP_SHM_SINGLE_COPY_BYTES=" << shm_single_copy_bytes
     << " HOROVOD_CPP_SHM_SINGLE_COPY_MAX_BYTES=" << shm_single_copy_max_bytes
     << " HOROVOD_CPP_SHM_MEASURED_MIN_BYTES=" << shm_measured_min_bytes
     << " HOROVOD_CPP_TEST_SHM_PATH_VOTES=" << test_shm_path_votes
     << " HOROVOD_CPP_TEST_SHM_PATH=" << test_shm_path
     << " HOROVOD_CPP_SHM_HIERARCHICAL=" << shm_hierarchical
     << " HOROVOD_CPP_TEST_RANKS_PER_HOST=" << test_ranks_per_host
     << " HOROVOD_CPP_TEST_HOSTS_ROUND_ROBIN=" << test_hosts_round_robin
     << " HOROVOD_TIMELINE=" << timeline_path
     << " HOROVOD_TIMELINE_MARK_CYCLES=" << timeline_mark_cycles
     << " HOROVOD_CPP_REDUCE_CHUNK_BYTES=" << reduce_chunk_bytes
     << " HOROVOD_CPP_BUFFER_CACHE_BYTES=" << buffer_cache_bytes
     << " HOROVOD_CPP_HUGE_PAGES=" << huge_pages
     << " HOROVOD_HIERARCHICAL_ALLREDUCE=" << hierarchical_allreduce
     << " HOROVOD_CPP_CUDA_DEVICE=" << cuda_device
     << " NCCL_MULTI_RANK_GPU_ENABLE=" << nccl_multi_rank_gpu
     << " HOROVOD_CPP_NCCL_TIMEOUT_SECONDS=" << nccl_timeout_seconds
     << " HOROVOD_AUTOTUNE=" << autotune << " HOROVOD_AUTOTUNE_LOG=" << autotune_log
     << " HOROVOD_AUTOTUNE_WARMUP_SAMPLES=" << autotune_warmup_samples
     << " HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE=" << autotune_steps_per_sample
     << " HOROVOD_CPP_AUTOTUNE_SAMPLES_PER_TRIAL=" << autotune_samples_per_trial;
  return os.str();
}

}  // namespace hvd
