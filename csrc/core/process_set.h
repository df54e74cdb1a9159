// Copyright horovod_cpp authors. A process set: a group of ranks that negotiate and run
// collectives together, independently of every other set.
//
// Each set owns its planes (control plane and transports, made by the runtime's World or, in
// unit tests, in-process ones), controller (negotiation, response cache, stall report),
// executor and background thread, so one set's stall or slow collective
// never holds up another set's work. Set 0 holds every rank.
//
// Threads: user threads call enqueue() (any number, concurrently). A cycle (take the new
// requests, negotiate, execute) is run by whichever thread holds `cycle_mu_`: the set's
// background thread (loop()), or a user thread waiting on one of this set's handles
// (try_drive(), through detail::CycleDriver), which saves the two thread hand-offs of a
// small collective. `mu_` guards what user threads share with the cycle: the pending table,
// new_requests_, the shutdown flag and the stop status. The controller, executor, autotuner
// and timeline bookkeeping belong to the holder of `cycle_mu_`.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "transport/world.h"
#include "common/config.h"
#include "common/name_index.h"
#include "coordination/controller.h"
#include "core/executor.h"
#include "core/tensor_entry.h"
#include "tuning/autotuner.h"

namespace hvd {

class Timeline;

class ProcessSetState : public detail::CycleDriver {
 public:
  /// Takes ownership of `planes` (this rank must be a member) and starts the background thread.
  /// Made by create() only (handles keep a weak reference to the set, as_driver()).
  ProcessSetState(int id, std::vector<int> global_ranks, int my_global_rank,
                  std::unique_ptr<SetPlanes> planes, const Config& config, Timeline* timeline);
  /// A new set (the constructor's arguments), shared.
  static std::shared_ptr<ProcessSetState> create(int id, std::vector<int> global_ranks,
                                                 int my_global_rank,
                                                 std::unique_ptr<SetPlanes> planes,
                                                 const Config& config, Timeline* timeline);
  ~ProcessSetState() override;
  ProcessSetState(const ProcessSetState&) = delete;
  ProcessSetState& operator=(const ProcessSetState&) = delete;

  int id() const { return id_; }
  const std::vector<int>& ranks() const { return global_ranks_; }
  int rank() const { return rank_; }  ///< this rank's index in ranks()
  int size() const { return static_cast<int>(global_ranks_.size()); }
  /// The set's transports, in the order they are tried (read-only after construction).
  const TransportRegistry& transports() const { return *planes_->transports; }

  /// A fresh "<op>.noname.<n>" name for an unnamed call: n counts this set's unnamed calls of
  /// that op on this rank, so unnamed calls must come in the same order on every member.
  std::string auto_name(OpType op) {
    return std::string(op_type_name(op)) + ".noname." +
           std::to_string(noname_counter_[static_cast<int>(op)]++);
  }

  /// Submits entries atomically (a group arrives in one cycle), moving them out of `entries`
  /// (the caller keeps the vector, to reuse its room). Fails at once, submitting nothing and
  /// leaving `entries` as they were, if a name is already pending or the set has stopped.
  Status enqueue(std::vector<TensorEntry>&& entries);

  /// One tensor submitted by itself whose checks all passed on this rank: enqueue_one()
  /// writes its request straight into the negotiation's queue and the rest straight into the
  /// tensor's place, where enqueue() of a one-entry vector moves both out of a TensorEntry
  /// built first (a third of a tiny tensor's submission, docs/benchmarks.md round sixteen).
  struct Single {
    // Constructors of its own: value- or aggregate-initialized, the whole struct was zeroed
    // first by a `rep stos`, a sixth of the API's own part of the submission.
    Single() {}  // NOLINT(modernize-use-equals-default)
    Single(OpType op_, const std::string* name_, TensorView* input_, TensorView* output_,
           ReduceOp reduce_op_, double prescale_, double postscale_, int32_t root_,
           std::shared_ptr<detail::HandleState> handle_, int64_t enqueue_us_)
        : op(op_),
          name(name_),
          input(input_),
          output(output_),
          reduce_op(reduce_op_),
          prescale(prescale_),
          postscale(postscale_),
          root(root_),
          handle(std::move(handle_)),
          enqueue_us(enqueue_us_) {}
    OpType op = OpType::kAllreduce;
    const std::string* name = nullptr;  ///< never empty (unnamed calls are numbered first)
    TensorView* input = nullptr;        ///< moved from; its shape becomes the request's
    TensorView* output = nullptr;       ///< moved from (its shape already dropped); null: in place
    ReduceOp reduce_op = ReduceOp::kSum;
    double prescale = 1.0;
    double postscale = 1.0;
    int32_t root = 0;
    std::shared_ptr<detail::HandleState> handle;  ///< moved into the place
    int64_t enqueue_us = 0;
  };
  /// enqueue() of one tensor, without the TensorEntry: the same outcome, the same failures
  /// (nothing is moved from `t` then).
  Status enqueue_one(Single&& t);

  /// Asks every member to stop (their pending operations fail with a ShutdownError naming this
  /// rank) without waiting.
  void request_shutdown();
  /// request_shutdown(), then waits for this rank's thread.
  void shutdown();
  /// False once the thread stopped (shutdown on any member, stall, fatal error).
  bool running() const { return !stopped_.load(); }
  std::string stop_reason() const;

  /// This set as the CycleDriver of its handles (HandleState::set_driver): a weak reference
  /// made once, so each submission copies it (one reference count) instead of converting
  /// weak_from_this() (which locks and releases a strong reference, three more atomics on a
  /// cache line the background thread shares).
  const std::weak_ptr<detail::CycleDriver>& as_driver() const { return self_; }

  /// For tests: how many names are bound to a place now, and whether `name` is.
  size_t bound_names() const {
    std::lock_guard<std::mutex> lk(mu_);
    return names_.size();
  }
  bool is_bound(const std::string& name) const {
    std::lock_guard<std::mutex> lk(mu_);
    return names_.find(name) != NameIndex::kNone;
  }

  // detail::CycleDriver: a thread waiting on one of this set's handles runs cycles itself.
  Drive try_drive() override;
  void begin_driving() override;
  void end_driving() override;

 private:
  void loop();
  /// One cycle, with `cycle_mu_` held. False once the set has stopped (shutdown, failure).
  bool cycle();
  /// cycle(), with an exception turned into a fatal stop of the set (never throws).
  bool guarded_cycle();
  void fail_thread(const std::string& what);
  /// True when this rank has requests to negotiate or tensors in flight (mu_ held).
  bool has_work_locked() const {
    return !new_requests_.empty() || pending_count_ > 0 || shutdown_requested_;
  }
  void run_thread();  ///< the thread's body: loop(), and a fatal stop if anything throws
  void settle() const;
  void stop(const Status& why);
  std::string ranks_str() const;  ///< global ranks, for messages
  /// Takes the entries of `responses` (by the hits' tags, the others by name) for the
  /// executor; a response with no entry here gets a null one.
  void take_entries(const std::vector<Response>& responses, const std::vector<LocalHit>& hits,
                    std::vector<PendingTensor*>* entries);
  /// After execute(): the taken places become free.
  void recycle_taken();

  std::weak_ptr<detail::CycleDriver> self_;  // set by create(), before the set is shared
  const int id_;
  const std::vector<int> global_ranks_;
  int rank_ = -1;
  const Config config_;
  Timeline* timeline_;
  std::unique_ptr<SetPlanes> planes_;  // outlives controller_ and executor_, which use it
  std::unique_ptr<Controller> controller_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<Autotuner> autotuner_;  // HOROVOD_AUTOTUNE, global set only
  std::atomic<double> cycle_time_ms_;     // the autotuner may change it (in a cycle)

  std::mutex cycle_mu_;  // held while running a cycle, by the background or a user thread
  std::unordered_map<std::string, int64_t> negotiating_;  // cycle_mu_: timeline, name -> start
  std::vector<Request> spare_requests_;  // cycle_mu_: the next burst's vector (cycle())
  size_t last_burst_ = 0;                // cycle_mu_: requests taken by the last busy cycle
  std::atomic<int> drivers_{0};  // user threads trying to drive cycles (try_drive())

  mutable std::mutex mu_;
  std::condition_variable cv_;
  // The tensors' places. A name keeps its place from one submission to the next (a training
  // step submits the same names every time): the name is looked up once per submission, and
  // the place travels with the request (Request::local_tag) and back with a cache hit's
  // response (CycleResult::hits), as does the cache position the name had (cache_hint), so
  // neither the negotiation nor take_entries() looks the name up again. Entries live in
  // pool_ (a deque: an entry stays put while places are added); places are reused, never
  // returned: an entry allocated by a user thread and freed by this one cost more than the
  // rest of a tiny tensor's table work.
  enum class PlaceState : uint8_t {
    kFree,     ///< in free_, bound to no name
    kIdle,     ///< bound to its name in names_, nothing submitted
    kPending,  ///< submitted, waiting for its response
    kTaken,    ///< take_entries() gave it to the executor, which reads it without mu_
  };
  struct Place {
    PendingTensor entry;
    PlaceState state = PlaceState::kFree;
    /// False once its name was bound to another place (resubmitted while this one was still
    /// taken): recycle_taken() then frees it instead of keeping it for the name.
    bool bound = false;
    uint32_t cache_hint = kNoLocalTag;  ///< the cache position of the name's last hit
    /// The place submitted right after this one the last time (or kNoLocalTag): a training
    /// loop submits its tensors in the same order every step, so enqueue() tries it before
    /// hashing and probing the index for the next name.
    uint32_t next = kNoLocalTag;
    /// The name bound to this place while `bound` (names_ maps it here exactly then).
    std::string name;
    /// Filled since the last sweep of idle names: a name in use every step survives sweeps.
    bool used = false;
  };
  NameIndex names_;             // guarded by mu_: name -> its place
  std::deque<Place> pool_;      // guarded by mu_, except the taken places' entries
  std::vector<uint32_t> free_;  // guarded by mu_
  size_t pending_count_ = 0;    // guarded by mu_: places in kPending
  size_t sweep_at_ = 1024;      // guarded by mu_: names_ size at which idle names are dropped
  std::vector<uint32_t> found_;  // guarded by mu_: enqueue()'s lookups of a group's names
  uint32_t last_placed_ = kNoLocalTag;  // guarded by mu_: the place enqueue() filled last
  /// names_.find(name), mu_ held; tries the place that followed the last one filled first.
  uint32_t find_place(const std::string& name) const;
  /// The place for `name`, whose place in names_ is `at` (or NameIndex::kNone), mu_ held: its
  /// own when idle, a new one otherwise; kNoLocalTag if a tensor of that name is still
  /// pending (`*pending_op`: its op).
  uint32_t place_for(const std::string& name, uint32_t at, OpType* pending_op);
  /// Moves `e` into place `at` (made pending) and its request, tagged, to new_requests_.
  void fill(uint32_t at, TensorEntry& e);
  /// Controller::ResponseCheck: a full cycle's responses against this rank's pending tensors.
  void check_responses(const std::vector<Response>& responses, std::vector<std::string>* problems);
  /// Makes place `at` pending, the one filled after the last (mu_ held), and returns it.
  Place& claim(uint32_t at);
  /// Before a submission's lookups (mu_ held): the failure of enqueue() while the set stops
  /// or has stopped; otherwise sweeps idle names when due (sweep_idle_names()) and is OK.
  Status admit_locked(OpType op, const std::string& name);
  /// The failure of enqueue() for a name whose tensor is still pending (a `pending_op`).
  Status still_pending(OpType op, const std::string& name, OpType pending_op) const;
  /// After a submission is in (mu_ held, released by this): counts it and wakes the thread.
  void submitted(std::unique_lock<std::mutex>& lk);
  /// Unbinds the names of idle places not filled since the last sweep and frees those places;
  /// enqueue() calls it once names_ has grown to sweep_at_, twice what the last sweep left
  /// (names used once, such as unnamed calls' numbered names, would otherwise pile up). A
  /// name submitted between two sweeps keeps its place (a model's parameters are submitted
  /// every step: dropping them made each step hash and insert them again).
  void sweep_idle_names();
  // cycle_mu_: the places take_entries() took, and their entries (read through the pointer:
  // pool_ itself may be growing under a user thread meanwhile), until execute() returns.
  std::vector<std::pair<uint32_t, PendingTensor*>> taken_;
  std::vector<Request> new_requests_;                   // guarded by mu_
  bool shutdown_requested_ = false;                     // guarded by mu_
  bool sleeping_ = false;  // guarded by mu_: the thread waits on cv_ (enqueue must notify)
  // Guarded by mu_: the thread waits on cv_ while user threads drive the cycles; new work
  // needs no wake-up then (a driver takes it), only the last driver's end_driving().
  bool parked_ = false;
  // Set with new_requests_ (under mu_), read without it by the idle thread's poll.
  std::atomic<bool> has_new_{false};
  std::atomic<uint64_t> enqueued_{0};  // mu_ to write: submissions so far (settle() reads it)
  /// How long an idle background thread polls for new work before it sleeps on cv_.
  static constexpr std::chrono::microseconds kIdleSpin{50};
  /// A burst of submissions is over when none came for kSettle (or a thread waits on a
  /// handle); the background thread waits at most kSettleMax for that before its cycle.
  /// It polls for the first kSettleSpin, then naps kSettle at a time.
  static constexpr std::chrono::microseconds kSettle{5};
  static constexpr std::chrono::microseconds kSettleSpin{2};
  static constexpr std::chrono::microseconds kSettleMax{100};
  Status stop_status_;                                  // guarded by mu_
  std::atomic<bool> stopped_{false};
  std::atomic<uint64_t> noname_counter_[kMaxOpType + 1] = {};
  std::thread thread_;
};

}  // namespace hvd
