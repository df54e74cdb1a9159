// Copyright horovod_cpp authors.
#include "core/process_set.h"

#include <algorithm>
#include <chrono>

#include "backends/mpi/mpi_control_plane.h"
#include "backends/mpi/mpi_data_plane.h"
#include "backends/shm/shm_setup.h"
#include "common/logging.h"
#include "core/timeline.h"
#include "horovod_cpp_build_config.h"
#if HOROVOD_CPP_HAVE_NCCL
#include "backends/nccl/nccl_runner.h"
#endif

namespace hvd {

ProcessSetState::ProcessSetState(int id, std::vector<int> global_ranks, int my_global_rank, MPI_Comm data,
                       MPI_Comm control, const MpiContext* mpi, const Config& config,
                       Timeline* timeline)
    : id_(id),
      global_ranks_(std::move(global_ranks)),
      config_(config),
      timeline_(timeline),
      data_comm_(data),
      control_comm_(control) {
  rank_ = static_cast<int>(std::find(global_ranks_.begin(), global_ranks_.end(), my_global_rank) -
                           global_ranks_.begin());
  control_ = std::make_unique<MpiControlPlane>(control_comm_, rank_, size());
  data_ = std::make_unique<MpiDataPlane>(mpi, data_comm_, config_.reduce_chunk_bytes);
  ControllerOptions copts;
  copts.cache_capacity = static_cast<uint32_t>(config_.cache_capacity);
  copts.stall_check_seconds = config_.stall_check_seconds;
  copts.stall_check_disabled = config_.stall_check_disabled;
  copts.stall_shutdown_seconds = config_.stall_shutdown_seconds;
  controller_ = std::make_unique<Controller>(control_.get(), copts);
  if (config_.shm_enabled) {
    std::string why_not;
    shm_ = make_shm_allreduce(data_comm_, id_, config_.shm_chunk_bytes, &why_not);
    if (!shm_ && size() > 1) {
      HVD_LOG(kInfo) << "process set " << id_ << ": shared-memory allreduce unavailable ("
                     << why_not << "); CPU allreduces use MPI";
    }
  }
  HVD_LOG(kDebug) << "process set " << id_ << ": CPU allreduce through "
                  << (shm_ ? "shared memory (large) and MPI (small)" : "MPI");
  executor_ = std::make_unique<Executor>(data_.get(), rank_, size(), config_.fusion_threshold_bytes,
                                         global_ranks_, timeline_);
  executor_->set_shm(shm_.get(), config_.shm_min_bytes);
#if HOROVOD_CPP_HAVE_NCCL
  // GPU data plane: the runner makes its NCCL communicator on the first CUDA collective.
  NcclRunnerOptions gpu;
  gpu.set_id = id_;
  gpu.rank = rank_;
  gpu.size = size();
  gpu.global_ranks = global_ranks_;
  gpu.data_comm = data_comm_;
  gpu.mpi = mpi;
  gpu.config = config_;
  device_runner_ = make_nccl_runner(gpu);
  executor_->set_device_runner(device_runner_.get());
#endif
  cycle_time_ms_ = config_.cycle_time_ms;
  if (config_.autotune && id_ == 0) {
    autotuner_ = std::make_unique<Autotuner>(
        config_, rank_ == 0,
        [this](double* seconds, double* bytes) {  // the slowest rank's sample, everywhere
          double v[2] = {*seconds, *bytes};
          HVD_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_DOUBLE, MPI_MAX, data_comm_));
          *seconds = v[0];
          *bytes = v[1];
          return Status::OK();
        },
        [this](int64_t threshold, double cycle_ms) {
          executor_->set_fusion_threshold(threshold);
          cycle_time_ms_ = cycle_ms;
        });
  }
  if (timeline_) {
    Timeline* tl = timeline_;
    controller_->set_request_observer([tl](const std::string& name, int r) {
      if (tl->enabled()) tl->instant(name, "rank " + std::to_string(r) + " ready", now_us());
    });
  }
  thread_ = std::thread([this] { loop(); });
}

ProcessSetState::~ProcessSetState() {
  shutdown();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    MPI_Comm_free(&data_comm_);
    MPI_Comm_free(&control_comm_);
  }
}

std::string ProcessSetState::stop_reason() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stop_status_.message();
}

Status ProcessSetState::enqueue(std::vector<TensorEntry> entries) {
  std::lock_guard<std::mutex> lk(mu_);
  const Request& first = entries.front().request;
  if (stopped_ || shutdown_requested_) {
    const std::string why = stop_status_.ok() ? "horovod_cpp is shutting down" : stop_status_.message();
    return Status::Shutdown(std::string(op_type_name(first.op)) + " '" + first.name +
                            "' rejected: " + why);
  }
  for (const auto& e : entries) {
    auto it = table_.find(e.request.name);
    if (it != table_.end()) {
      return Status::InvalidArgument(
          std::string(op_type_name(e.request.op)) + " '" + e.request.name + "' on rank " +
          std::to_string(global_ranks_[static_cast<size_t>(rank_)]) + ": a " +
          op_type_name(it->second.request.op) +
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

void ProcessSetState::take_entries(const std::vector<Response>& responses,
                                   std::vector<TensorEntry>* entries, std::vector<bool>* present) {
  entries->resize(responses.size());
  present->assign(responses.size(), false);
  std::lock_guard<std::mutex> lk(mu_);
  for (size_t i = 0; i < responses.size(); ++i) {
    auto it = table_.find(responses[i].name);
    if (it == table_.end()) continue;
    (*entries)[i] = std::move(it->second);
    (*present)[i] = true;
    table_.erase(it);
  }
}

void ProcessSetState::loop() {
  // The idle heartbeat starts at HOROVOD_CYCLE_TIME and doubles while nothing happens, up to
  // 32 times that: an idle job costs almost no CPU, and work still wakes the thread at once.
  auto base_idle = std::chrono::duration<double, std::milli>(cycle_time_ms_);
  auto idle = base_idle;
  const auto take = [this](const std::vector<Response>& rs, std::vector<TensorEntry>* es,
                           std::vector<bool>* present) { take_entries(rs, es, present); };
  std::unordered_map<std::string, int64_t> negotiating;  // timeline: name -> start (us)
  while (true) {
    std::vector<Request> incoming;
    bool shutdown;
    bool traced = false;
    {
      std::unique_lock<std::mutex> lk(mu_);
      // Sleep only when this rank has nothing in flight: new work wakes us at once, and the
      // timeout is the heartbeat that lets other ranks' cycles complete.
      if (new_requests_.empty() && table_.empty() && !shutdown_requested_) {
        const bool woken =
            cv_.wait_for(lk, idle, [this] { return !new_requests_.empty() || shutdown_requested_; });
        idle = woken ? base_idle : std::min(idle * 2, base_idle * 32);
      } else {
        idle = base_idle;
      }
      incoming.swap(new_requests_);
      shutdown = shutdown_requested_;
      traced = timeline_ && timeline_->enabled();  // after the wait: it may have just started
      if (traced) {
        const int64_t now = now_us();
        for (const Request& q : incoming) {
          auto it = table_.find(q.name);
          if (it != table_.end() && it->second.enqueue_us > 0) {
            timeline_->phase(q.name, "QUEUE", it->second.enqueue_us, now);
          }
          negotiating[q.name] = now;
        }
      }
    }
    CycleResult result;
    if (traced) timeline_->cycle(id_, controller_->cycles(), now_us());
    Status s = controller_->run_cycle(std::move(incoming), shutdown, &result);
    if (!s.ok()) {
      HVD_LOG(kError) << "process set " << id_ << ": coordination failed, stopping: " << s.message();
      stop(Status::Backend("horovod_cpp stopped: coordination failed: " + s.message()));
      return;
    }
    if (traced) {
      const int64_t now = now_us();
      for (const Response& r : result.responses) {
        auto it = negotiating.find(r.name);
        if (it == negotiating.end()) continue;
        timeline_->phase(r.name, "NEGOTIATE", it->second, now,
                         std::string("\"cached\":") + (result.full_cycle ? "false" : "true"));
        negotiating.erase(it);
      }
    } else if (!negotiating.empty()) {
      negotiating.clear();
    }
    // joined() is read before executing: the join response itself clears it.
    const bool joined = controller_->joined() || std::any_of(result.responses.begin(),
        result.responses.end(), [](const Response& r) { return r.op == OpType::kJoin; });
    executor_->execute(result.responses, take, joined);
    if (autotuner_ && !autotuner_->done()) {
      int64_t bytes = 0;
      for (const Response& r : result.responses) {
        if (r.op == OpType::kAllreduce && r.ok()) bytes += r.nbytes_for_rank(rank_);
      }
      const double now_s = static_cast<double>(now_us()) * 1e-6;
      Status t = autotuner_->after_cycle(bytes, now_s);
      if (!t.ok()) {
        stop(Status::Backend("horovod_cpp stopped: autotune failed: " + t.message()));
        return;
      }
      base_idle = std::chrono::duration<double, std::milli>(cycle_time_ms_);
    }
    if (result.shutdown) {
      stop(Status::Shutdown(result.shutdown_reason));
      return;
    }
  }
}

void ProcessSetState::stop(const Status& why) {
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

void ProcessSetState::request_shutdown() {
  std::lock_guard<std::mutex> lk(mu_);
  shutdown_requested_ = true;
  cv_.notify_one();
}

void ProcessSetState::shutdown() {
  request_shutdown();
  if (thread_.joinable()) thread_.join();
}

}  // namespace hvd
