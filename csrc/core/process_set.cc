// Copyright horovod_cpp authors.
#include "core/process_set.h"

#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "common/logging.h"
#include "common/fatal.h"
#include "core/timeline.h"

namespace hvd {

std::shared_ptr<ProcessSetState> ProcessSetState::create(int id, std::vector<int> global_ranks,
                                                         int my_global_rank,
                                                         std::unique_ptr<SetPlanes> planes,
                                                         const Config& config, Timeline* timeline) {
  auto set = std::make_shared<ProcessSetState>(id, std::move(global_ranks), my_global_rank,
                                               std::move(planes), config, timeline);
  set->self_ = set;
  return set;
}

ProcessSetState::ProcessSetState(int id, std::vector<int> global_ranks, int my_global_rank,
                                 std::unique_ptr<SetPlanes> planes, const Config& config,
                                 Timeline* timeline)
    : id_(id),
      global_ranks_(std::move(global_ranks)),
      config_(config),
      timeline_(timeline),
      planes_(std::move(planes)) {
  rank_ = static_cast<int>(std::find(global_ranks_.begin(), global_ranks_.end(), my_global_rank) -
                           global_ranks_.begin());
  ControllerOptions copts;
  copts.cache_capacity = static_cast<uint32_t>(config_.cache_capacity);
  copts.stall_check_seconds = config_.stall_check_seconds;
  copts.stall_check_disabled = config_.stall_check_disabled;
  copts.stall_shutdown_seconds = config_.stall_shutdown_seconds;
  copts.test_corrupt_response = config_.test_corrupt_response;
  controller_ = std::make_unique<Controller>(planes_->control.get(), copts);
  controller_->set_response_check(
      [this](const std::vector<Response>& rs, std::vector<std::string>* problems) {
        check_responses(rs, problems);
      });
  HVD_LOG(kDebug) << "process set " << id_ << ": transports " << planes_->transports->describe();
  executor_ = std::make_unique<Executor>(planes_->transports.get(), config_.fusion_threshold_bytes,
                                         global_ranks_, timeline_);
  cycle_time_ms_ = config_.cycle_time_ms;
  if (config_.autotune && id_ == 0) {
    ControlPlane* control = planes_->control.get();
    autotuner_ = std::make_unique<Autotuner>(
        config_, rank_ == 0,
        [control](double* seconds, double* bytes) {  // the slowest rank's sample, everywhere
          // Over the set's control plane: this runs on the set's own thread, between cycles.
          double v[2] = {*seconds, *bytes};
          std::vector<std::string> all;
          HVD_RETURN_IF_ERROR(control->gather(
              std::string(reinterpret_cast<const char*>(v), sizeof(v)), &all));
          std::string blob;
          if (control->rank() == 0) {
            for (const std::string& s : all) {
              if (s.size() != sizeof(v)) return Status::Backend("autotune: malformed sample");
              double w[2];
              std::memcpy(w, s.data(), sizeof(w));
              v[0] = std::max(v[0], w[0]);
              v[1] = std::max(v[1], w[1]);
            }
            blob.assign(reinterpret_cast<const char*>(v), sizeof(v));
          }
          HVD_RETURN_IF_ERROR(control->broadcast(&blob));
          if (blob.size() != sizeof(v)) return Status::Backend("autotune: malformed agreement");
          std::memcpy(v, blob.data(), sizeof(v));
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
  thread_ = std::thread([this] { run_thread(); });
}

void ProcessSetState::run_thread() {
  try {
    loop();
  } catch (...) {
    fail_thread("the background thread of global rank " +
                std::to_string(global_ranks_[static_cast<size_t>(rank_)]) +
                " failed: " + describe_current_exception());
  }
}

// Out of memory in a buffer, a transport's exception: without this, std::terminate would end
// the process with a message that names neither the set nor the work. The other members may
// be waiting in a collective this rank left, so it is fatal (the job ends after the grace,
// common/fatal.h); this rank's pending work fails now.
void ProcessSetState::fail_thread(const std::string& what) {
  const std::string where =
      "process set " + std::to_string(id_) + " (global ranks " + ranks_str() + "): " + what;
  HVD_LOG(kError) << where;
  report_fatal(where);
  stop(Status::Backend("horovod_cpp stopped: " + where));
}

ProcessSetState::~ProcessSetState() {
  shutdown();
  // The transports finish what they still run (GPU work completes its handles), then the
  // planes release their communicators.
  executor_.reset();
  controller_.reset();
  planes_.reset();
}

std::string ProcessSetState::ranks_str() const {
  std::string out;
  for (size_t i = 0; i < global_ranks_.size() && i < 16; ++i) {
    out += (i ? "," : "") + std::to_string(global_ranks_[i]);
  }
  if (global_ranks_.size() > 16) out += ",...";
  return out;
}

std::string ProcessSetState::stop_reason() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stop_status_.message();
}

Status ProcessSetState::admit_locked(OpType op, const std::string& name) {
  if (stopped_ || shutdown_requested_) {
    const std::string why =
        stop_status_.ok() ? "horovod_cpp is shutting down" : stop_status_.message();
    return Status::Shutdown(std::string(op_type_name(op)) + " '" + name + "' rejected: " + why);
  }
  // Swept before the lookups, so the places they find stay valid until used.
  if (names_.size() >= sweep_at_) sweep_idle_names();
  return Status::OK();
}

Status ProcessSetState::still_pending(OpType op, const std::string& name, OpType pending_op) const {
  return Status::InvalidArgument(std::string(op_type_name(op)) + " '" + name + "' on rank " +
                                 std::to_string(global_ranks_[static_cast<size_t>(rank_)]) +
                                 ": a " + op_type_name(pending_op) +
                                 " of the same name is still pending; wait for it before reusing "
                                 "the name");
}

void ProcessSetState::submitted(std::unique_lock<std::mutex>& lk) {
  // Written under mu_ only: a plain store, not a locked read-modify-write.
  enqueued_.store(enqueued_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  has_new_.store(true, std::memory_order_release);
  if (sleeping_) {
    // Notified after unlocking: a thread woken under the lock would only block on it again.
    lk.unlock();
    cv_.notify_one();
  }
}

Status ProcessSetState::enqueue(std::vector<TensorEntry>&& entries) {
  std::unique_lock<std::mutex> lk(mu_);
  const Request& first = entries.front().request;
  HVD_RETURN_IF_ERROR(admit_locked(first.op, first.name));
  // The requests go to the negotiation; the places keep the rest (PendingTensor).
  OpType pending_op = OpType::kAllreduce;
  if (entries.size() == 1) {  // one probe of the index
    TensorEntry& e = entries.front();
    const uint32_t at = place_for(e.request.name, find_place(e.request.name), &pending_op);
    if (at == kNoLocalTag) return still_pending(e.request.op, e.request.name, pending_op);
    fill(at, e);
  } else {
    found_.clear();  // each name probed once, checked for every member before any is placed
    for (const auto& e : entries) {
      const uint32_t at = find_place(e.request.name);
      if (at != NameIndex::kNone && pool_[at].state == PlaceState::kPending) {
        return still_pending(e.request.op, e.request.name, pool_[at].entry.op);
      }
      found_.push_back(at);
    }
    for (size_t i = 0; i < entries.size(); ++i) {  // names are unique within a submission
      fill(place_for(entries[i].request.name, found_[i], &pending_op), entries[i]);
    }
  }
  submitted(lk);
  return Status::OK();
}

Status ProcessSetState::enqueue_one(Single&& t) {
  const std::string& name = *t.name;
  std::unique_lock<std::mutex> lk(mu_);
  HVD_RETURN_IF_ERROR(admit_locked(t.op, name));
  OpType pending_op = OpType::kAllreduce;
  const uint32_t at = place_for(name, find_place(name), &pending_op);
  if (at == kNoLocalTag) return still_pending(t.op, name, pending_op);
  // Each field written once, in place: the request into the queue's room (its vector is
  // reused cycle after cycle), the views into the place the name had last time. The request
  // first: if its room cannot grow, the place is left as it was.
  Request& q = new_requests_.emplace_back();
  Place& p = claim(at);
  PendingTensor& e = p.entry;
  e.op = t.op;
  q.rank = rank_;
  q.op = t.op;
  q.name = name;
  q.dtype = t.input->dtype;
  q.shape = std::move(t.input->shape);
  q.device = t.input->device;
  q.reduce_op = t.reduce_op;
  q.prescale = t.prescale;
  q.postscale = t.postscale;
  q.root = t.root;
  q.local_tag = at;
  q.cache_hint = p.cache_hint;
  e.asked = digest_of(q);
  t.input->shape.clear();  // moved-from: now certainly empty, so the view moves a few words
  e.input = std::move(*t.input);
  if (t.output) {
    e.output = std::move(*t.output);
  } else {
    e.output = e.input;  // no shape: nothing allocated
  }
  e.handle = std::move(t.handle);
  e.part = 0;
  e.enqueue_us = t.enqueue_us;
  submitted(lk);
  return Status::OK();
}

uint32_t ProcessSetState::find_place(const std::string& name) const {
  if (last_placed_ != kNoLocalTag) {
    const uint32_t guess = pool_[last_placed_].next;
    if (guess != kNoLocalTag) {
      const Place& p = pool_[guess];
      if (p.bound && p.name == name) return guess;  // bound: names_ maps `name` here
    }
  }
  return names_.find(name);
}

uint32_t ProcessSetState::place_for(const std::string& name, uint32_t at, OpType* pending_op) {
  if (at != NameIndex::kNone) {
    Place& p = pool_[at];
    if (p.state == PlaceState::kIdle) return at;  // the steady state: the name's own place
    if (p.state == PlaceState::kPending) {
      *pending_op = p.entry.op;
      return kNoLocalTag;
    }
    // Taken: the executor still reads it (the handle completed, recycle_taken() has not run
    // yet). The name moves to a new place; this one is freed when the executor is done.
    p.bound = false;
    names_.erase(name);
  }
  uint32_t fresh;
  if (free_.empty()) {
    fresh = static_cast<uint32_t>(pool_.size());
    pool_.emplace_back();
  } else {
    fresh = free_.back();
    free_.pop_back();
  }
  names_.insert(name, fresh);
  Place& p = pool_[fresh];
  p.state = PlaceState::kIdle;
  p.bound = true;
  p.name = name;
  p.cache_hint = kNoLocalTag;
  return fresh;
}

ProcessSetState::Place& ProcessSetState::claim(uint32_t at) {
  Place& p = pool_[at];
  p.state = PlaceState::kPending;
  p.used = true;
  ++pending_count_;
  if (last_placed_ != kNoLocalTag) pool_[last_placed_].next = at;
  last_placed_ = at;
  return p;
}

void ProcessSetState::fill(uint32_t at, TensorEntry& e) {
  Place& p = claim(at);
  e.op = e.request.op;
  e.asked = digest_of(e.request);
  p.entry = std::move(static_cast<PendingTensor&>(e));
  // The request goes straight to the negotiation, tagged with its place.
  e.request.local_tag = at;
  e.request.cache_hint = p.cache_hint;
  new_requests_.push_back(std::move(e.request));
}

void ProcessSetState::sweep_idle_names() {
  std::vector<std::string> idle;
  names_.for_each([&](const std::string& name, uint32_t at) {
    Place& p = pool_[at];
    if (p.state == PlaceState::kIdle && !p.used) idle.push_back(name);
    p.used = false;
  });
  for (const std::string& name : idle) {
    const uint32_t at = names_.erase(name);
    pool_[at].state = PlaceState::kFree;
    pool_[at].bound = false;
    free_.push_back(at);
  }
  sweep_at_ = std::max<size_t>(1024, 2 * names_.size());
}

void ProcessSetState::recycle_taken() {
  for (auto& [at, e] : taken_) e->handle.reset();  // the executor moved the rest out
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& [at, e] : taken_) {
    Place& p = pool_[at];
    if (p.bound) {
      p.state = PlaceState::kIdle;  // kept for the name's next submission
    } else {
      p.state = PlaceState::kFree;
      free_.push_back(at);
    }
  }
  taken_.clear();
}

void ProcessSetState::take_entries(const std::vector<Response>& responses,
                                   const std::vector<LocalHit>& hits,
                                   std::vector<PendingTensor*>* entries) {
  // Only the state changes happen under the lock (user threads enqueue meanwhile); the
  // entries stay in their places, which recycle_taken() releases after execute().
  taken_.clear();
  entries->assign(responses.size(), nullptr);
  std::lock_guard<std::mutex> lk(mu_);
  for (size_t i = 0; i < responses.size(); ++i) {
    uint32_t at = i < hits.size() ? hits[i].tag : kNoLocalTag;
    if (at == kNoLocalTag) {
      at = names_.find(responses[i].name);
      if (at == NameIndex::kNone) continue;
    } else if (at >= pool_.size()) {
      continue;
    }
    Place& p = pool_[at];
    if (p.state != PlaceState::kPending) continue;
    if (i < hits.size()) p.cache_hint = hits[i].bit;
    p.state = PlaceState::kTaken;
    --pending_count_;
    taken_.emplace_back(at, &p.entry);
    (*entries)[i] = &p.entry;
  }
}

void ProcessSetState::check_responses(const std::vector<Response>& responses,
                                      std::vector<std::string>* problems) {
  // Before execute(): the joined state is the one it will see (the join response clears it).
  const bool joined = controller_->joined();
  const int size = static_cast<int>(global_ranks_.size());
  std::lock_guard<std::mutex> lk(mu_);
  for (size_t i = 0; i < responses.size(); ++i) {
    const Response& r = responses[i];
    if (!r.ok()) continue;
    const uint32_t at = names_.find(r.name);
    if (at == NameIndex::kNone || pool_[at].state != PlaceState::kPending) {
      // A joined rank runs allreduces it did not submit, with zeros (take_entries()).
      if (!(joined && r.op == OpType::kAllreduce)) {
        (*problems)[i] = "rank " + std::to_string(rank_) + " has not submitted it";
      }
      continue;
    }
    const Status s = check_response_against_request(r, pool_[at].entry.asked_for(), rank_, size);
    if (!s.ok()) (*problems)[i] = s.message();
  }
}

// Called with new requests queued: while a user thread is still submitting tensors one call
// at a time (and nobody waits on a handle yet), let it finish, so that the burst is
// negotiated in one cycle. Cycling during the burst would cost a negotiation per few tensors
// and make the submitting thread contend with this one for the table.
void ProcessSetState::settle() const {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto last_change = start;
  uint64_t seen = enqueued_.load(std::memory_order_relaxed);
  while (detail::threads_waiting() == 0) {
    const auto now = clock::now();
    const uint64_t n = enqueued_.load(std::memory_order_relaxed);
    if (n != seen) {
      seen = n;
      last_change = now;
    } else if (now - last_change >= kSettle) {
      return;
    }
    if (now - start >= kSettleMax) return;
    if (now - start < kSettleSpin) {
      std::this_thread::yield();
    } else {
      // Sleep, not spin: the submitting thread (and, with several ranks per core, the other
      // ranks) need the CPU more than this thread does.
      timespec ts{0, static_cast<long>(std::chrono::nanoseconds(kSettle).count())};
      nanosleep(&ts, nullptr);
    }
  }
}

void ProcessSetState::loop() {
#ifdef __linux__
  // Short sleeps (settle()) should last about what they ask, not the default 50 us slack.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
#endif
  // The idle heartbeat starts at HOROVOD_CYCLE_TIME and doubles while nothing happens, up to
  // 32 times that: an idle job costs almost no CPU, and work still wakes the thread at once.
  using ms = std::chrono::duration<double, std::milli>;
  auto idle = ms(cycle_time_ms_.load());
  while (!stopped_.load()) {
    const auto base_idle = ms(cycle_time_ms_.load());  // the autotuner may change it
    if (has_new_.load(std::memory_order_acquire)) settle();
    bool for_work;  // false: the idle heartbeat, a cycle that other ranks' cycles may need
    {
      std::unique_lock<std::mutex> lk(mu_);
      // Sleep only when this rank has nothing in flight: new work wakes us at once, and the
      // timeout is the heartbeat that lets other ranks' cycles complete.
      const auto has_work = [this] { return !new_requests_.empty() || shutdown_requested_; };
      if (new_requests_.empty() && pending_count_ == 0 && !shutdown_requested_) {
        // Poll first, without the lock: the next submission usually comes within
        // microseconds, and waking a sleeping thread costs more than the collective itself.
        lk.unlock();
        const auto spin_end = std::chrono::steady_clock::now() + kIdleSpin;
        while (!has_new_.load(std::memory_order_acquire) &&
               std::chrono::steady_clock::now() < spin_end) {
          std::this_thread::yield();  // two ranks may share a core: let the other one run
        }
        if (has_new_.load(std::memory_order_acquire)) settle();
        lk.lock();
        bool woken = has_work();
        if (!woken) {
          sleeping_ = true;
          woken = cv_.wait_for(lk, idle, has_work);
          sleeping_ = false;
          if (woken && !shutdown_requested_) {
            lk.unlock();
            settle();
            lk.lock();
          }
        }
        idle = woken ? base_idle : std::min(idle * 2, base_idle * 32);
      } else {
        idle = base_idle;
      }
      // A user thread waiting on a handle runs the cycles itself (try_drive()): leave them to
      // it, and take over when it stops (end_driving() wakes this thread) or on the heartbeat.
      if (drivers_.load(std::memory_order_acquire) > 0 && !shutdown_requested_) {
        parked_ = true;
        cv_.wait_for(lk, base_idle, [this] {
          return drivers_.load(std::memory_order_acquire) == 0 || shutdown_requested_;
        });
        parked_ = false;
        continue;
      }
      for_work = has_work_locked();
    }
    std::lock_guard<std::mutex> cl(cycle_mu_);
    if (stopped_.load()) return;
    if (for_work) {
      // A user thread may have run the cycles this work needed while we waited for the lock.
      std::lock_guard<std::mutex> lk(mu_);
      if (!has_work_locked()) continue;
    }
    if (!guarded_cycle()) return;
  }
}

namespace {
// The cycle this thread is running, if any: a wait inside a cycle (none today) must not try
// to run another, which would lock cycle_mu_ twice.
thread_local bool t_in_cycle = false;
struct InCycle {
  InCycle() { t_in_cycle = true; }
  ~InCycle() { t_in_cycle = false; }
};
}  // namespace

bool ProcessSetState::guarded_cycle() {
  InCycle in_cycle;
  try {
    return cycle();
  } catch (...) {
    fail_thread("a cycle run by " +
                std::string(std::this_thread::get_id() == thread_.get_id()
                                ? "the background thread"
                                : "a user thread waiting on a handle") +
                " of global rank " + std::to_string(global_ranks_[static_cast<size_t>(rank_)]) +
                " failed: " + describe_current_exception());
    return false;
  }
}

bool ProcessSetState::cycle() {
  std::vector<Request> incoming;
  // The next burst's vector, sized like the last burst outside the lock: grown one push at a
  // time under the lock, it would reallocate (and move every Request) a dozen times.
  if (spare_requests_.capacity() < last_burst_) spare_requests_.reserve(last_burst_);
  bool shutdown;
  bool traced = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    has_new_.store(false, std::memory_order_relaxed);
    if (!new_requests_.empty()) {
      incoming.swap(new_requests_);
      new_requests_.swap(spare_requests_);
    }
    shutdown = shutdown_requested_;
    traced = timeline_ && timeline_->enabled();  // now: it may have just started
    if (traced) {
      const int64_t now = now_us();
      for (const Request& q : incoming) {
        const uint32_t at = q.local_tag;
        if (at < pool_.size() && pool_[at].entry.enqueue_us > 0) {
          timeline_->phase(q.name, "QUEUE", pool_[at].entry.enqueue_us, now);
        }
        negotiating_[q.name] = now;
      }
    }
  }
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
    const Status why = Status::Backend("horovod_cpp stopped: coordination failed: " + s.message());
    // The other members may be waiting in a negotiation step this rank left: fatal.
    report_fatal("process set " + std::to_string(id_) + " (global ranks " + ranks_str() +
                 "): " + why.message());
    stop(why);
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
  const bool joined = controller_->joined() || std::any_of(result.responses.begin(),
      result.responses.end(), [](const Response& r) { return r.op == OpType::kJoin; });
  const auto take = [this, &result](const std::vector<Response>& rs,
                                    std::vector<PendingTensor*>* es) {
    take_entries(rs, result.hits, es);
  };
  {
    // The taken places are freed when execute() returns, exception or not.
    struct Release {
      ProcessSetState* self;
      ~Release() { self->recycle_taken(); }
    } release{this};
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
      stop(Status::Backend("horovod_cpp stopped: autotune failed: " + t.message()));
      return false;
    }
  }
  controller_->recycle(std::move(result.responses), std::move(result.hits));
  if (result.shutdown) {
    if (result.fatal) {
      report_fatal("process set " + std::to_string(id_) + " (global ranks " + ranks_str() +
                   "): " + result.shutdown_reason);
    }
    stop(Status::Shutdown(result.shutdown_reason));
    return false;
  }
  return true;
}

detail::CycleDriver::Drive ProcessSetState::try_drive() {
  if (t_in_cycle) return Drive::kBusy;
  std::unique_lock<std::mutex> cl(cycle_mu_, std::try_to_lock);
  if (!cl.owns_lock()) return Drive::kBusy;
  if (stopped_.load()) return Drive::kStopped;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!has_work_locked()) return Drive::kIdle;
  }
  return guarded_cycle() ? Drive::kRan : Drive::kStopped;
}

void ProcessSetState::begin_driving() { drivers_.fetch_add(1, std::memory_order_acq_rel); }

void ProcessSetState::end_driving() {
  if (drivers_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  // The last driver stopped: the background thread takes over what is left (under mu_, so a
  // thread about to park cannot miss it). With nothing left it need not wake: its park ends
  // on the heartbeat anyway, and a wake-up would cost this thread a system call.
  std::lock_guard<std::mutex> lk(mu_);
  if ((parked_ || sleeping_) && has_work_locked()) cv_.notify_one();
}

void ProcessSetState::stop(const Status& why) {
  struct Orphan {
    std::string name;
    OpType op;
    std::shared_ptr<detail::HandleState> handle;
  };
  std::vector<Orphan> orphans;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_status_ = why;
    stopped_ = true;
    names_.for_each([&](const std::string& name, uint32_t at) {
      Place& p = pool_[at];
      if (p.state == PlaceState::kTaken) {  // the executor still reads it: freed after
        p.bound = false;
        return;
      }
      if (p.state == PlaceState::kPending) {
        orphans.push_back({name, p.entry.op, std::move(p.entry.handle)});
      }
      p.state = PlaceState::kFree;
      p.bound = false;
      free_.push_back(at);
    });
    names_.clear();
    pending_count_ = 0;
    new_requests_.clear();
    cv_.notify_all();  // the background thread exits (a user thread may have run the last cycle)
  }
  for (Orphan& o : orphans) {
    o.handle->complete(Status(why.code(), std::string(op_type_name(o.op)) + " '" + o.name +
                                              "' did not complete: " + why.message()));
  }
}

void ProcessSetState::request_shutdown() {
  std::lock_guard<std::mutex> lk(mu_);
  shutdown_requested_ = true;
  has_new_.store(true, std::memory_order_release);
  cv_.notify_one();
}

void ProcessSetState::shutdown() {
  request_shutdown();
  if (thread_.joinable()) thread_.join();
  // A user thread may still be leaving try_drive() (it finds the set stopped at once): the
  // runtime must not tear down the planes under it.
  while (drivers_.load(std::memory_order_acquire) > 0) std::this_thread::yield();
}

}  // namespace hvd
