// Copyright horovod_cpp authors.
#include "core/cycle.h"

#include <algorithm>
#include <string>
#include <vector>

#include "common/fatal.h"
#include "common/logging.h"
#include "core/timeline.h"
#include "tuning/agreement.h"

namespace hvd {

Cycle::Cycle(int set_id, const std::vector<int>& global_ranks, int rank, SetPlanes* planes,
             TensorTable* table, const Config& config, Timeline* timeline)
    : id_(set_id),
      global_ranks_(global_ranks),
      rank_(rank),
      planes_(planes),
      table_(table),
      timeline_(timeline),
      cycle_time_ms_(config.cycle_time_ms) {
  ControllerOptions copts;
  copts.cache_capacity = static_cast<uint32_t>(config.cache_capacity);
  copts.stall_check_seconds = config.stall_check_seconds;
  copts.stall_check_disabled = config.stall_check_disabled;
  copts.stall_shutdown_seconds = config.stall_shutdown_seconds;
  copts.test_corrupt_response = config.test_corrupt_response;
  if (set_id != 0) copts.rank_names = global_ranks;  // messages name global ranks
  controller_ = std::make_unique<Controller>(planes_->control.get(), copts);
  // Every fresh response is checked against this rank's own request before anything is sized
  // from it (the joined state is the one execute() will see: the join response clears it).
  controller_->set_response_check(
      [this](const std::vector<Response>& rs, std::vector<std::string>* problems) {
        table_->check_responses(rs, controller_->joined(), static_cast<int>(global_ranks_.size()),
                                problems);
      });
  controller_->set_requests_sent([this](const std::vector<Request>& qs) { table_->note_sent(qs); });
  HVD_LOG(kDebug) << "process set " << id_ << ": transports " << planes_->transports->describe();
  executor_ = std::make_unique<Executor>(planes_->transports.get(), config.fusion_threshold_bytes,
                                         global_ranks_, timeline_);
  if (config.autotune && id_ == 0) {
    ControlPlane* control = planes_->control.get();
    autotuner_ = std::make_unique<Autotuner>(
        config, rank_ == 0,
        // Over the set's control plane, between cycles.
        [control](double* seconds, double* bytes) {
          return agree_on_slowest(*control, seconds, bytes);
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
}

// The transports finish what they still run (GPU work completes its handles) before the
// controller goes.
Cycle::~Cycle() {
  executor_.reset();
  controller_.reset();
}

std::string Cycle::where() const {
  std::string out = "process set " + std::to_string(id_) + " (global ranks ";
  for (size_t i = 0; i < global_ranks_.size() && i < 16; ++i) {
    out += (i ? "," : "") + std::to_string(global_ranks_[i]);
  }
  if (global_ranks_.size() > 16) out += ",...";
  return out + ")";
}

// Out of memory in a buffer, a transport's exception: without this, std::terminate would end
// the process with a message that names neither the set nor the work. The other members may
// be waiting in a collective this rank left, so it is fatal (the job ends after the grace,
// common/fatal.h); this rank's pending work fails now.
void Cycle::fail(const std::string& what) {
  const std::string msg = where() + ": " + what;
  HVD_LOG(kError) << msg;
  report_fatal(msg);
  table_->stop(Status::Backend("horovod_cpp stopped: " + msg));
}

bool Cycle::run() {
  std::vector<Request> incoming;
  // The next burst's vector, sized like the last burst outside the lock: grown one push at a
  // time under the lock, it would reallocate (and move every Request) a dozen times.
  if (spare_requests_.capacity() < last_burst_) spare_requests_.reserve(last_burst_);
  bool traced = false;
  int64_t taken_at = 0;
  const bool shutdown = table_->take_new(
      &incoming, &spare_requests_,
      [&] {
        traced = timeline_ && timeline_->enabled();  // now: it may have just started
        if (traced) taken_at = now_us();
        return traced;
      },
      [&](const Request& q, int64_t enqueue_us) {
        if (enqueue_us > 0) timeline_->phase(q.name, "QUEUE", enqueue_us, taken_at);
        negotiating_[q.name] = taken_at;
      });
  if (!incoming.empty()) last_burst_ = incoming.size();
  CycleResult result;
  if (traced) timeline_->cycle(id_, controller_->cycles(), now_us());
  controller_->set_votes(planes_->transports->path_votes());
  Status s = controller_->run_cycle(std::move(incoming), shutdown, &result);
  {
    std::vector<Request> back = controller_->take_spare_requests();  // emptied, with room
    if (back.capacity() > spare_requests_.capacity()) spare_requests_.swap(back);
  }
  if (!s.ok()) {
    HVD_LOG(kError) << "process set " << id_ << ": coordination failed, stopping: " << s.message();
    // A lost peer (Gloo: ErrorCode::kInternal) keeps its code: the pending work fails with
    // hvd::InternalError, which an elastic program answers with shutdown() and init().
    const Status why(s.code() == ErrorCode::kInternal ? ErrorCode::kInternal : ErrorCode::kBackend,
                     "horovod_cpp stopped: coordination failed: " + s.message());
    // The other members may be waiting in a negotiation step this rank left: fatal.
    report_fatal(where() + ": " + why.message());
    table_->stop(why);
    return false;
  }
  if (traced) {
    const int64_t now = now_us();
    for (const Response& r : result.responses) {
      auto it = negotiating_.find(r.name);
      if (it == negotiating_.end()) continue;
      timeline_->phase(r.name, "NEGOTIATE", it->second, now,
                       std::string("\"cached\":") + (result.full_cycle ? "false" : "true"));
      negotiating_.erase(it);
    }
  } else if (!negotiating_.empty()) {
    negotiating_.clear();
  }
  // joined() is read before executing: the join response itself clears it.
  const bool joined =
      controller_->joined() || std::any_of(result.responses.begin(), result.responses.end(),
                                           [](const Response& r) { return r.op == OpType::kJoin; });
  const auto take = [this, &result](const std::vector<Response>& rs,
                                    std::vector<PendingTensor*>* es) {
    table_->take_entries(rs, result.hits, es);
  };
  {
    // The taken places are freed when execute() returns, exception or not.
    struct Release {
      TensorTable* table;
      ~Release() { table->recycle_taken(); }
    } release{table_};
    // Every rank makes the same measured choices for this cycle's batches.
    planes_->transports->set_agreed_paths(result.votes);
    executor_->execute(result.responses, take, joined);
  }
  if (autotuner_ && !autotuner_->done()) {
    int64_t bytes = 0;
    for (const Response& r : result.responses) {
      if (r.op == OpType::kAllreduce && r.ok()) bytes += r.nbytes_for_rank(rank_);
    }
    const double now_s = static_cast<double>(now_us()) * 1e-6;
    Status t = autotuner_->after_cycle(bytes, now_s);
    if (!t.ok()) {
      table_->stop(Status::Backend("horovod_cpp stopped: autotune failed: " + t.message()));
      return false;
    }
  }
  controller_->recycle(std::move(result.responses), std::move(result.hits));
  if (result.shutdown) {
    if (result.fatal) report_fatal(where() + ": " + result.shutdown_reason);
    table_->stop(Status::Shutdown(result.shutdown_reason));
    return false;
  }
  return true;
}

}  // namespace hvd
