// Copyright horovod_cpp authors.
#include "core/runtime.h"

#include <algorithm>
#include <sstream>

#include "common/logging.h"
#include "core/timeline.h"

namespace hvd {

Runtime::Runtime() = default;

Status Runtime::create(const InitOptions& options, std::unique_ptr<Runtime>* out) {
  std::unique_ptr<Runtime> rt(new Runtime());
  HVD_RETURN_IF_ERROR(rt->start(options));
  *out = std::move(rt);
  return Status::OK();
}

Status Runtime::start(const InitOptions& options) {
  HVD_RETURN_IF_ERROR(Config::from_env(&config_));
  set_log_level(config_.log_level);
  HVD_RETURN_IF_ERROR(mpi_.init(options.use_comm, static_cast<MPI_Fint>(options.mpi_comm_fortran)));
  set_log_rank(mpi_.rank());
  Status agree = check_config_agreement();
  if (!agree.ok()) {
    mpi_.release();
    return agree;
  }
  HVD_LOG(kDebug) << "config: " << config_.describe() << "; rank " << mpi_.rank() << "/"
                  << mpi_.size() << " local " << mpi_.local_rank() << "/" << mpi_.local_size()
                  << " cross " << mpi_.cross_rank() << "/" << mpi_.cross_size();
  timeline_ = std::make_unique<Timeline>(mpi_.rank());
  if (!config_.timeline_path.empty()) {
    HVD_RETURN_IF_ERROR(timeline_->start(config_.timeline_path, config_.timeline_mark_cycles));
  }
  std::vector<int> all(static_cast<size_t>(mpi_.size()));
  for (int r = 0; r < mpi_.size(); ++r) all[static_cast<size_t>(r)] = r;
  int id = 0;
  HVD_RETURN_IF_ERROR(add_process_set(all, &id));
  for (const auto& ranks : options.process_sets) {
    HVD_RETURN_IF_ERROR(add_process_set(ranks, &id));
  }
  return Status::OK();
}

// Settings that change what the ranks compute together must be equal everywhere: the cache
// (identical caches), the fusion plan and the chunking (matching MPI calls).
Status Runtime::check_config_agreement() {
  constexpr int kN = 7;
  long long mine[kN] = {config_.cache_capacity,       config_.fusion_threshold_bytes,
                        config_.reduce_chunk_bytes,   config_.shm_enabled ? 1 : 0,
                        config_.shm_min_bytes,        config_.shm_chunk_bytes,
                        config_.autotune ? 1 : 0};
  const char* names[kN] = {"HOROVOD_CACHE_CAPACITY",    "HOROVOD_FUSION_THRESHOLD",
                           "HOROVOD_CPP_REDUCE_CHUNK_BYTES", "HOROVOD_CPP_SHM",
                           "HOROVOD_CPP_SHM_MIN_BYTES", "HOROVOD_CPP_SHM_CHUNK_BYTES",
                           "HOROVOD_AUTOTUNE"};
  std::vector<long long> all(kN * static_cast<size_t>(mpi_.size()));
  HVD_MPI_CHECK(MPI_Allgather(mine, kN, MPI_LONG_LONG, all.data(), kN, MPI_LONG_LONG,
                              mpi_.base_comm()));
  for (int k = 0; k < kN; ++k) {
    for (int r = 1; r < mpi_.size(); ++r) {
      const long long v0 = all[static_cast<size_t>(k)];
      const long long vr = all[static_cast<size_t>(kN * r + k)];
      if (v0 != vr) {
        std::ostringstream os;
        os << names[k] << " must be the same on every rank: rank 0 has " << v0 << ", rank " << r
           << " has " << vr;
        return Status::InvalidArgument(os.str());
      }
    }
  }
  return Status::OK();
}

Runtime::~Runtime() {
  shutdown();
  timeline_.reset();
  mpi_.release();
}

Status Runtime::add_process_set(std::vector<int> ranks, int* id) {
  std::sort(ranks.begin(), ranks.end());
  const int n = mpi_.size();
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
  long long len = local_error.empty() ? static_cast<long long>(ranks.size()) : -1;
  std::vector<long long> lens(static_cast<size_t>(n));
  HVD_MPI_CHECK(MPI_Allgather(&len, 1, MPI_LONG_LONG, lens.data(), 1, MPI_LONG_LONG, mpi_.base_comm()));
  for (int r = 0; r < n; ++r) {
    if (lens[static_cast<size_t>(r)] < 0) {
      return Status::InvalidArgument(local_error.empty()
                                         ? "add_process_set: rank " + std::to_string(r) +
                                               " passed an invalid list of ranks"
                                         : local_error);
    }
  }
  std::vector<int> root_ranks = ranks;
  root_ranks.resize(static_cast<size_t>(lens[0]));
  HVD_MPI_CHECK(MPI_Bcast(root_ranks.data(), static_cast<int>(lens[0]), MPI_INT, 0, mpi_.base_comm()));
  int differs = root_ranks != ranks ? 1 : 0;
  std::vector<int> all_differ(static_cast<size_t>(n));
  HVD_MPI_CHECK(MPI_Allgather(&differs, 1, MPI_INT, all_differ.data(), 1, MPI_INT, mpi_.base_comm()));
  for (int r = 0; r < n; ++r) {
    if (all_differ[static_cast<size_t>(r)]) {
      std::ostringstream os;
      os << "add_process_set: every rank must pass the same ranks; rank 0 passed [";
      for (size_t i = 0; i < root_ranks.size(); ++i) os << (i ? "," : "") << root_ranks[i];
      os << "] but rank " << r << " passed a different list";
      if (r == mpi_.rank()) {
        os << " [";
        for (size_t i = 0; i < ranks.size(); ++i) os << (i ? "," : "") << ranks[i];
        os << "]";
      }
      return Status::InvalidArgument(os.str());
    }
  }
  std::lock_guard<std::mutex> lk(sets_mu_);
  *id = next_set_id_++;
  return create_set(std::move(ranks), *id);
}

Status Runtime::create_set(std::vector<int> ranks, int id) {
  MPI_Comm data = MPI_COMM_NULL, control = MPI_COMM_NULL;
  HVD_RETURN_IF_ERROR(mpi_.make_comms(ranks, &data, &control));
  set_ranks_[id] = ranks;
  if (data != MPI_COMM_NULL) {
    sets_[id] = std::make_shared<ProcessSetState>(id, std::move(ranks), mpi_.rank(), data, control,
                                             &mpi_, config_, timeline_.get());
  }
  return Status::OK();
}

Status Runtime::remove_process_set(int id) {
  if (id == 0) return Status::InvalidArgument("remove_process_set: the global set cannot be removed");
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
  os << "rank " << mpi_.rank() << " is not a member of process set " << id << " (ranks ";
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
  std::lock_guard<std::mutex> lk(sets_mu_);
  sets_.clear();
}

bool Runtime::running() const {
  std::lock_guard<std::mutex> lk(sets_mu_);
  auto it = sets_.find(0);
  return it != sets_.end() && it->second->running();
}


}  // namespace hvd
