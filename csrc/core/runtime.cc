// Copyright horovod_cpp authors.
#include "core/runtime.h"

#include <chrono>
#include <sstream>

#include "backends/mpi/mpi_control_plane.h"
#include "backends/mpi/mpi_data_plane.h"
#include "common/logging.h"

namespace hvd {

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
  HVD_RETURN_IF_ERROR(check_config_agreement());
  HVD_LOG(kDebug) << "config: " << config_.describe();

  control_ = std::make_unique<MpiControlPlane>(mpi_.control_comm(), mpi_.rank(), mpi_.size());
  data_ = std::make_unique<MpiDataPlane>(&mpi_, config_.reduce_chunk_bytes);
  ControllerOptions copts;
  copts.cache_capacity = static_cast<uint32_t>(config_.cache_capacity);
  copts.stall_check_seconds = config_.stall_check_seconds;
  copts.stall_check_disabled = config_.stall_check_disabled;
  copts.stall_shutdown_seconds = config_.stall_shutdown_seconds;
  controller_ = std::make_unique<Controller>(control_.get(), copts);
  executor_ = std::make_unique<Executor>(data_.get(), mpi_.rank(), mpi_.size(),
                                         config_.fusion_threshold_bytes);
  HVD_LOG(kDebug) << "data plane: " << data_->name() << "; rank " << mpi_.rank() << "/"
                  << mpi_.size() << " local " << mpi_.local_rank() << "/" << mpi_.local_size()
                  << " cross " << mpi_.cross_rank() << "/" << mpi_.cross_size();
  thread_ = std::thread([this] { loop(); });
  return Status::OK();
}

// Settings that change what the ranks compute together must be equal everywhere: the cache
// (identical caches), the fusion plan and the chunking (matching MPI calls).
Status Runtime::check_config_agreement() {
  long long mine[3] = {config_.cache_capacity, config_.fusion_threshold_bytes,
                       config_.reduce_chunk_bytes};
  const char* names[3] = {"HOROVOD_CACHE_CAPACITY", "HOROVOD_FUSION_THRESHOLD",
                          "HOROVOD_CPP_REDUCE_CHUNK_BYTES"};
  std::vector<long long> all(3 * static_cast<size_t>(mpi_.size()));
  HVD_MPI_CHECK(MPI_Allgather(mine, 3, MPI_LONG_LONG, all.data(), 3, MPI_LONG_LONG,
                              mpi_.control_comm()));
  for (int k = 0; k < 3; ++k) {
    for (int r = 1; r < mpi_.size(); ++r) {
      const long long v0 = all[static_cast<size_t>(k)];
      const long long vr = all[static_cast<size_t>(3 * r + k)];
      if (v0 != vr) {
        std::ostringstream os;
        os << names[k] << " must be the same on every rank: rank 0 has " << v0 << ", rank " << r
           << " has " << vr;
        mpi_.release();
        return Status::InvalidArgument(os.str());
      }
    }
  }
  return Status::OK();
}

Runtime::~Runtime() {
  shutdown();
  mpi_.release();
}

std::string Runtime::auto_name(OpType op) {
  const uint64_t n = noname_counter_[static_cast<int>(op)]++;
  return std::string(op_type_name(op)) + ".noname." + std::to_string(n);
}

std::string Runtime::stop_reason() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stop_status_.message();
}

Status Runtime::enqueue(std::vector<TensorEntry> entries) {
  std::lock_guard<std::mutex> lk(mu_);
  if (stopped_ || shutdown_requested_) {
    const std::string why = stop_status_.ok() ? "horovod_cpp is shutting down"
                                              : stop_status_.message();
    return Status::Shutdown(std::string(op_type_name(entries.front().request.op)) + " '" +
                            entries.front().request.name + "' rejected: " + why);
  }
  for (const auto& e : entries) {
    auto it = table_.find(e.request.name);
    if (it != table_.end()) {
      return Status::InvalidArgument(
          std::string(op_type_name(e.request.op)) + " '" + e.request.name + "' on rank " +
          std::to_string(mpi_.rank()) + ": a " + op_type_name(it->second.request.op) +
          " of the same name is still pending; wait for it before reusing the name");
    }
  }
  for (auto& e : entries) {
    new_requests_.push_back(e.request);
    std::string name = e.request.name;
    table_.emplace(std::move(name), std::move(e));
  }
  cv_.notify_one();
  return Status::OK();
}

bool Runtime::take_entry(const std::string& name, TensorEntry* out) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = table_.find(name);
  if (it == table_.end()) return false;
  *out = std::move(it->second);
  table_.erase(it);
  return true;
}

void Runtime::loop() {
  const auto idle = std::chrono::duration<double, std::milli>(config_.cycle_time_ms);
  const auto take = [this](const std::string& n, TensorEntry* e) { return take_entry(n, e); };
  while (true) {
    std::vector<Request> incoming;
    bool shutdown;
    {
      std::unique_lock<std::mutex> lk(mu_);
      // Sleep only when this rank has nothing in flight: new work wakes us at once, and the
      // timeout is the heartbeat that lets other ranks' cycles complete.
      if (new_requests_.empty() && table_.empty() && !shutdown_requested_) {
        cv_.wait_for(lk, idle,
                     [this] { return !new_requests_.empty() || shutdown_requested_; });
      }
      incoming.swap(new_requests_);
      shutdown = shutdown_requested_;
    }
    CycleResult result;
    Status s = controller_->run_cycle(std::move(incoming), shutdown, &result);
    if (!s.ok()) {
      HVD_LOG(kError) << "coordination failed, stopping: " << s.message();
      stop(Status::Backend("horovod_cpp stopped: coordination failed: " + s.message()));
      return;
    }
    executor_->execute(result.responses, take);
    if (result.shutdown) {
      stop(Status::Shutdown(result.shutdown_reason));
      return;
    }
  }
}

void Runtime::stop(const Status& why) {
  std::unordered_map<std::string, TensorEntry> orphans;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_status_ = why;
    stopped_ = true;
    orphans.swap(table_);
    new_requests_.clear();
  }
  for (auto& [name, e] : orphans) {
    e.handle->complete(Status(why.code(), std::string(op_type_name(e.request.op)) + " '" + name +
                                              "' did not complete: " + why.message()));
  }
}

void Runtime::shutdown() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    shutdown_requested_ = true;
    cv_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

}  // namespace hvd
