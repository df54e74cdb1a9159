// Copyright horovod_cpp authors.
#include "core/runtime.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "common/buffer_cache.h"
#include "common/fatal.h"
#include "common/logging.h"
#include "coordination/wire.h"
#include "core/timeline.h"
#include "horovod_cpp_build_config.h"

namespace hvd {

Runtime::Runtime() = default;

Status Runtime::create(const InitOptions& options, std::unique_ptr<Runtime>* out) {
  for (;;) {
    std::unique_ptr<Runtime> rt(new Runtime());
    Status st = rt->start(options);
    if (st.ok()) {
      *out = std::move(rt);
      return Status::OK();
    }
    // An elastic membership that lost a member while it was being set up (its world
    // connected, then an agreement or a set's connect failed): this worker announces itself
    // for the next membership, which the driver forms without the lost one. Each pass waits
    // for a new assignment; the driver's end or HOROVOD_ELASTIC_TIMEOUT ends the loop.
    if (!rt->joined_elastic_ || st.code() != ErrorCode::kInternal) return st;
    HVD_LOG(kWarning) << "elastic generation " << rt->elastic_generation_
                      << " lost a member while it was set up, waiting for the next one: "
                      << st.message();
  }
}

Status Runtime::start(const InitOptions& options) {
  HVD_RETURN_IF_ERROR(Config::from_env(&config_));
  set_log_level(config_.log_level);
  set_fatal_grace(config_.abort_grace_seconds);
  set_host_buffer_cache_limit(config_.buffer_cache_bytes);
  set_host_buffer_huge_pages(config_.huge_pages);
  HVD_RETURN_IF_ERROR(make_world(options, &world_));
  joined_elastic_ = world_->elastic();
  elastic_generation_ = world_->elastic_generation();
  if (config_.test_exit_after_connect) {
    std::fflush(nullptr);
    ::_exit(9);
  }
  set_log_rank(world_->rank());
  // Started before the agreement, which tells every rank whether rank 0 could open it.
  timeline_ = std::make_unique<Timeline>(world_->rank());
  Status timeline = Status::OK();
  if (!config_.timeline_path.empty()) {
    timeline = timeline_->start(config_.timeline_path, config_.timeline_mark_cycles);
  }
  Status agree = check_version_agreement();
  if (agree.ok()) agree = check_config_agreement(timeline);
  if (!agree.ok()) {
    timeline_.reset();
    world_.reset();
    return agree;
  }
  HVD_LOG(kDebug) << "config: " << config_.describe() << "; rank " << world_->rank() << "/"
                  << world_->size() << " local " << world_->local_rank() << "/" << world_->local_size()
                  << " cross " << world_->cross_rank() << "/" << world_->cross_size();
  std::vector<int> all(static_cast<size_t>(world_->size()));
  for (int r = 0; r < world_->size(); ++r) all[static_cast<size_t>(r)] = r;
  int id = 0;
  HVD_RETURN_IF_ERROR(add_process_set(all, &id));
  {
    std::lock_guard<std::mutex> lk(sets_mu_);
    auto it = sets_.find(0);
    if (it != sets_.end()) global_set_ = it->second;  // fixed: find_set(0) reads it unlocked
  }
  for (const auto& ranks : options.process_sets) {
    HVD_RETURN_IF_ERROR(add_process_set(ranks, &id));
  }
  return Status::OK();
}

// Every rank must run the same library version and wire format (coordination/wire.h): a
// message another version wrote may decode wrongly or not at all. The exchange has a fixed
// size that no future version may change, so that it works between any two versions.
Status Runtime::check_version_agreement() {
  constexpr int kLen = 64;
  const std::string version = config_.test_fake_version.empty() ? std::string(HOROVOD_CPP_VERSION)
                                                                : config_.test_fake_version;
  char mine[kLen] = {};
  std::snprintf(mine, kLen, "%s, wire format %d", version.c_str(),
                static_cast<int>(kWireFormatVersion));
  // Exchanged as 64-bit words through the World (core/ knows no MPI).
  constexpr int kWords = kLen / 8;
  std::vector<int64_t> words(kWords);
  std::memcpy(words.data(), mine, kLen);
  std::vector<int64_t> all;
  HVD_RETURN_IF_ERROR(world_->allgather(words, &all));
  auto at = [&](int r) {
    const char* p = reinterpret_cast<const char*>(all.data() + static_cast<size_t>(r) * kWords);
    return std::string(p, strnlen(p, kLen));
  };
  std::ostringstream os;
  int differ = 0;
  for (int r = 1; r < world_->size(); ++r) {
    if (at(r) == at(0)) continue;
    os << (differ++ ? ", " : "") << "rank " << r << " runs " << at(r);
  }
  if (differ == 0) return Status::OK();
  return Status::InvalidArgument(
      "every rank must run the same horovod_cpp version and wire format: "
      "rank 0 runs " +
      at(0) + ", but " + os.str());
}

// Settings that change what the ranks compute together must be equal everywhere: the cache
// (identical caches), the fusion plan, the chunking and the transport choices (matching MPI
// calls and shared-memory steps: a rank that skips a step the others take hangs or reads the
// wrong bytes). All are compared in one exchange; each rank fails init() with the same message,
// which names the first setting that differs and every rank whose value differs from rank 0's.
// The same exchange carries whether this rank's timeline (rank 0's) could be started, so
// that a refused HOROVOD_TIMELINE fails init() on every rank instead of leaving the others
// waiting for rank 0.
Status Runtime::check_config_agreement(const Status& timeline) {
  const Config& c = config_;
  // `autotune_only`: compared only with autotune on, where every rank runs the same search and
  // must call its collective sample exchange in the same cycles (tuning/autotuner.cc).
  struct Setting {
    const char* name;
    int64_t value;
    bool is_double;  // `value` holds the bits of a double
    bool autotune_only;
  };
  auto bits = [](double d) {
    int64_t v;
    std::memcpy(&v, &d, sizeof(v));
    return v;
  };
  const Setting settings[] = {
      {"HOROVOD_CACHE_CAPACITY", c.cache_capacity, false, false},
      {"HOROVOD_FUSION_THRESHOLD", c.fusion_threshold_bytes, false, false},
      {"HOROVOD_CPP_REDUCE_CHUNK_BYTES", c.reduce_chunk_bytes, false, false},
      {"HOROVOD_CPP_SHM", c.shm_enabled ? 1 : 0, false, false},
      {"HOROVOD_CPP_SHM_MIN_BYTES", c.shm_min_bytes, false, false},
      {"HOROVOD_CPP_SHM_CHUNK_BYTES", c.shm_chunk_bytes, false, false},
      {"HOROVOD_AUTOTUNE", c.autotune ? 1 : 0, false, false},
      {"HOROVOD_CPP_SHM_GATHER_MAX_BYTES", c.shm_gather_max_bytes, false, false},
      {"HOROVOD_CPP_SHM_SINGLE_COPY_BYTES", c.shm_single_copy_bytes, false, false},
      {"HOROVOD_CPP_SHM_HIERARCHICAL", c.shm_hierarchical ? 1 : 0, false, false},
      {"HOROVOD_CPP_TEST_RANKS_PER_HOST", c.test_ranks_per_host, false, false},
      {"HOROVOD_CPP_TEST_HOSTS_ROUND_ROBIN", c.test_hosts_round_robin ? 1 : 0, false, false},
      {"HOROVOD_CPP_SHM_CONTROL", c.shm_control ? 1 : 0, false, false},
      {"HOROVOD_CPP_SHM_SINGLE_COPY_MAX_BYTES", c.shm_single_copy_max_bytes, false, false},
      {"HOROVOD_CPP_SHM_MEASURED_MIN_BYTES", c.shm_measured_min_bytes, false, false},
      {"HOROVOD_CPP_TEST_SHM_PATH_VOTES", c.test_shm_path_votes ? 1 : 0, false, false},
      {"HOROVOD_CPP_TEST_SHM_PATH", c.test_shm_path, false, false},
      {"HOROVOD_CYCLE_TIME", bits(c.cycle_time_ms), true, true},
      {"HOROVOD_AUTOTUNE_WARMUP_SAMPLES", c.autotune_warmup_samples, false, true},
      {"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", c.autotune_steps_per_sample, false, true},
      {"HOROVOD_CPP_AUTOTUNE_SAMPLES_PER_TRIAL", c.autotune_samples_per_trial, false, true},
  };
  constexpr size_t kN = sizeof(settings) / sizeof(settings[0]);
  constexpr size_t kWords = kN + 1;  // the settings, then the timeline's status
  std::vector<int64_t> mine(kWords);
  for (size_t k = 0; k < kN; ++k) mine[k] = settings[k].value;
  mine[kN] = timeline.ok() ? 0 : 1;
  std::vector<int64_t> all;
  HVD_RETURN_IF_ERROR(world_->allgather(mine, &all));
  const size_t n = static_cast<size_t>(world_->size());
  if (all.size() != kWords * n) return Status::Backend("config agreement: short allgather");
  if (!timeline.ok()) return timeline;
  for (size_t r = 0; r < n; ++r) {
    if (all[kWords * r + kN] != 0) {
      return Status::InvalidArgument("rank " + std::to_string(r) +
                                     " could not start its timeline (HOROVOD_TIMELINE); its "
                                     "error says why");
    }
  }
  auto show = [&](size_t k, int64_t v) {
    if (!settings[k].is_double) return std::to_string(v);
    double d;
    std::memcpy(&d, &v, sizeof(d));
    std::ostringstream os;
    os << d;
    return os.str();
  };
  const bool autotune = c.autotune;  // compared before the settings that depend on it
  for (size_t k = 0; k < kN; ++k) {
    if (settings[k].autotune_only && !autotune) continue;
    std::ostringstream os;
    int differ = 0;
    for (size_t r = 1; r < n; ++r) {
      if (all[kWords * r + k] == all[k]) continue;
      os << (differ++ ? ", " : "") << "rank " << r << " has " << show(k, all[kWords * r + k]);
    }
    if (differ == 0) continue;
    return Status::InvalidArgument(std::string(settings[k].name) +
                                   " must be the same on every rank" +
                                   (settings[k].autotune_only ? " with HOROVOD_AUTOTUNE=1" : "") +
                                   ": rank 0 has " + show(k, all[k]) + ", " + os.str());
  }
  return Status::OK();
}

Runtime::~Runtime() {
  shutdown();
  global_set_.reset();  // its planes release their communicators before the world goes
  timeline_.reset();
  world_.reset();
}

Status Runtime::add_process_set(std::vector<int> ranks, int* id) {
  // One collective set operation at a time on this rank: two threads' calls would otherwise
  // interleave their MPI calls on the base communicator differently on different ranks.
  std::lock_guard<std::mutex> collective(collective_mu_);
  std::sort(ranks.begin(), ranks.end());
  const int n = world_->size();
  std::string local_error;
  if (ranks.empty()) local_error = "add_process_set: the set is empty";
  for (size_t i = 0; i < ranks.size() && local_error.empty(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= n) {
      local_error = "add_process_set: rank " + std::to_string(ranks[i]) + " is not in [0, " +
                    std::to_string(n) + ")";
    } else if (i > 0 && ranks[i] == ranks[i - 1]) {
      local_error = "add_process_set: rank " + std::to_string(ranks[i]) + " is listed twice";
    }
  }
  // Every rank must pass the same list: compare with rank 0's (and agree on local errors).
  std::vector<int64_t> lens;
  HVD_RETURN_IF_ERROR(world_->allgather({local_error.empty() ? static_cast<int64_t>(ranks.size()) : -1}, &lens));
  for (int r = 0; r < n; ++r) {
    if (lens[static_cast<size_t>(r)] < 0) {
      return Status::InvalidArgument(local_error.empty()
                                         ? "add_process_set: rank " + std::to_string(r) +
                                               " passed an invalid list of ranks"
                                         : local_error);
    }
  }
  std::vector<int> root_ranks = ranks;
  HVD_RETURN_IF_ERROR(world_->broadcast(&root_ranks, static_cast<int>(lens[0])));
  std::vector<int64_t> all_differ;
  HVD_RETURN_IF_ERROR(world_->allgather({root_ranks != ranks ? 1 : 0}, &all_differ));
  for (int r = 0; r < n; ++r) {
    if (all_differ[static_cast<size_t>(r)]) {
      std::ostringstream os;
      os << "add_process_set: every rank must pass the same ranks; rank 0 passed [";
      for (size_t i = 0; i < root_ranks.size(); ++i) os << (i ? "," : "") << root_ranks[i];
      os << "] but rank " << r << " passed a different list";
      if (r == world_->rank()) {
        os << " [";
        for (size_t i = 0; i < ranks.size(); ++i) os << (i ? "," : "") << ranks[i];
        os << "]";
      }
      return Status::InvalidArgument(os.str());
    }
  }
  // Ids are handed out under collective_mu_, in the same order on every rank.
  *id = next_set_id_++;
  return create_set(std::move(ranks), *id);
}

// The communicator split and the set's start (its shared-memory setup is collective too) run
// without sets_mu_, so other threads' collectives (find_set) are not held up meanwhile.
Status Runtime::create_set(std::vector<int> ranks, int id) {
  std::unique_ptr<SetPlanes> planes;
  HVD_RETURN_IF_ERROR(world_->make_set(id, ranks, config_, &planes));
  std::shared_ptr<ProcessSetState> set;
  if (planes) {
    set = ProcessSetState::create(id, ranks, world_->rank(), std::move(planes), config_,
                                  timeline_.get());
  }
  std::lock_guard<std::mutex> lk(sets_mu_);
  set_ranks_[id] = std::move(ranks);
  if (set) sets_[id] = std::move(set);
  return Status::OK();
}

Status Runtime::elastic_hosts_updated(bool* updated) {
  std::lock_guard<std::mutex> collective(collective_mu_);
  return world_->elastic_hosts_updated(updated);
}

Status Runtime::remove_process_set(int id) {
  if (id == 0) return Status::InvalidArgument("remove_process_set: the global set cannot be removed");
  std::lock_guard<std::mutex> collective(collective_mu_);
  std::shared_ptr<ProcessSetState> set;
  {
    std::lock_guard<std::mutex> lk(sets_mu_);
    if (!set_ranks_.count(id)) {
      return Status::InvalidArgument("remove_process_set: no process set " + std::to_string(id));
    }
    set_ranks_.erase(id);
    auto it = sets_.find(id);
    if (it != sets_.end()) {
      set = it->second;
      sets_.erase(it);
    }
  }
  if (set) set->shutdown();  // collective among its members, who all remove it
  return Status::OK();
}

Status Runtime::find_set(int id, std::shared_ptr<ProcessSetState>* out) const {
  if (id == 0 && global_set_) {  // every collective without a set: no lock, no map
    *out = global_set_;
    return Status::OK();
  }
  std::lock_guard<std::mutex> lk(sets_mu_);
  auto it = sets_.find(id);
  if (it != sets_.end()) {
    *out = it->second;
    return Status::OK();
  }
  auto rit = set_ranks_.find(id);
  if (rit == set_ranks_.end()) {
    return Status::InvalidArgument("process set " + std::to_string(id) +
                                   " does not exist (or was removed)");
  }
  std::ostringstream os;
  os << "rank " << world_->rank() << " is not a member of process set " << id << " (ranks ";
  for (size_t i = 0; i < rit->second.size(); ++i) os << (i ? "," : "") << rit->second[i];
  os << ")";
  return Status::InvalidArgument(os.str());
}

std::vector<int> Runtime::process_set_ranks(int id) const {
  std::lock_guard<std::mutex> lk(sets_mu_);
  auto it = set_ranks_.find(id);
  return it == set_ranks_.end() ? std::vector<int>() : it->second;
}

void Runtime::shutdown() {
  std::map<int, std::shared_ptr<ProcessSetState>> sets;
  {
    std::lock_guard<std::mutex> lk(sets_mu_);
    sets = sets_;
  }
  // Every set is told first, then waited for, so no member waits on another's late request.
  for (auto& [id, s] : sets) s->request_shutdown();
  for (auto& [id, s] : sets) s->shutdown();
  trim_host_buffer_cache();  // results still held by the user return their blocks later
  std::lock_guard<std::mutex> lk(sets_mu_);
  sets_.clear();
}

bool Runtime::running() const {
  std::lock_guard<std::mutex> lk(sets_mu_);
  auto it = sets_.find(0);
  return it != sets_.end() && it->second->running();
}


}  // namespace hvd
