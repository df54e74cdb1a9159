// Copyright horovod_cpp authors. A process set's table of submitted tensors: names and their
// places, admission of submissions, the queue of requests for the next cycle, and the hand-off
// of entries to the executor and back.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/name_index.h"
#include "common/status.h"
#include "coordination/message.h"
#include "core/tensor_entry.h"

namespace hvd {

class Scheduler;
struct LocalHit;  // coordination/controller.h

/// Shared by user threads (enqueue()) and the holder of the set's cycle (take_new(),
/// take_entries(), recycle_taken()). Everything is guarded by one mutex, which the scheduler
/// also waits on (its condition variable is wake_): a submission wakes a sleeping thread.
class TensorTable {
 public:
  /// `rank`: this rank's index in the set; `global_rank`: its rank in the job (messages).
  TensorTable(int rank, int global_rank) : rank_(rank), global_rank_(global_rank) {}
  TensorTable(const TensorTable&) = delete;
  TensorTable& operator=(const TensorTable&) = delete;

  /// Submits `n` tensors atomically (a group arrives in one cycle), moving their views,
  /// shapes and splits out. Fails at once, taking nothing and leaving every `tensors[i]` as
  /// it was, if a name is already pending or the table has stopped. Names are unique within
  /// a submission (the API checks).
  Status enqueue(TensorSubmit* tensors, size_t n, SubmitCommon& common);

  /// Moves the queued requests into `incoming` (its room goes to the queue: `room`, emptied,
  /// becomes the next queue) and says whether a shutdown was asked for. `each(request,
  /// enqueue_us)` sees every request taken, under the lock (timeline), if `traced()` says so
  /// once the lock is held.
  template <typename Traced, typename Each>
  bool take_new(std::vector<Request>* incoming, std::vector<Request>* room, Traced traced,
                Each each) {
    std::lock_guard<std::mutex> lk(mu_);
    has_new_.store(false, std::memory_order_relaxed);
    if (!new_requests_.empty()) {
      incoming->swap(new_requests_);
      new_requests_.swap(*room);
    }
    if (traced()) {
      for (const Request& q : *incoming) {
        const uint32_t at = q.local_tag;
        each(q, at < pool_.size() ? pool_[at].entry.enqueue_us : 0);
      }
    }
    return shutdown_requested_;
  }

  /// Takes the entries of `responses` (by the hits' tags, the others by name) for the
  /// executor; a response with no entry here gets a null one.
  void take_entries(const std::vector<Response>& responses, const std::vector<LocalHit>& hits,
                    std::vector<PendingTensor*>* entries);
  /// After execute(): the taken places become free.
  void recycle_taken();
  /// Controller::ResponseCheck: a full cycle's fresh responses against this rank's pending
  /// tensors (`problems[i]` set for each response this rank refuses). `joined`: this rank has
  /// joined, so it runs allreduces it did not submit (with zeros) and refuses none of those.
  void check_responses(const std::vector<Response>& responses, bool joined, int set_size,
                       std::vector<std::string>* problems) const;
  /// Controller::RequestsSent: keeps the digest of each of `requests` (this rank's, about to
  /// be sent in full) in its pending place, for check_responses(). Only a request sent in
  /// full can get a fresh response, so the digest is made here, not at every submission: a
  /// step whose tensors all go as cache bits makes none.
  void note_sent(const std::vector<Request>& requests);

  /// Asks for a shutdown: later submissions fail, and the scheduler's next cycle says so.
  void request_shutdown();
  /// Stops the table: later submissions fail with `why`, and the pending tensors' handles
  /// complete with it (their op and name in front).
  void stop(const Status& why);
  bool stopped() const { return stopped_.load(); }
  std::string stop_reason() const;

  /// How many submissions so far (read without the lock: the scheduler's settle()).
  uint64_t enqueued() const { return enqueued_.load(std::memory_order_relaxed); }
  /// True when a submission came since the last take_new() (read without the lock).
  bool has_new() const { return has_new_.load(std::memory_order_acquire); }

  /// For tests: how many names are bound to a place now, and whether `name` is.
  size_t bound_names() const;
  bool is_bound(const std::string& name) const;

 private:
  friend class Scheduler;  // waits on mu_ and wake_, and reads the work flags under mu_

  /// True when this rank has requests to negotiate or tensors in flight (mu_ held).
  bool has_work_locked() const {
    return !new_requests_.empty() || pending_count_ > 0 || shutdown_requested_;
  }

  // The tensors' places. A name keeps its place from one submission to the next (a training
  // step submits the same names every time): the name is looked up once per submission, and
  // the place travels with the request (Request::local_tag) and back with a cache hit's
  // response (CycleResult::hits), as does the cache position the name had (cache_hint), so
  // neither the negotiation nor take_entries() looks the name up again. Entries live in
  // pool_ (a deque: an entry stays put while places are added); places are reused, never
  // returned: an entry allocated by a user thread and freed by the cycle's cost more than
  // the rest of a tiny tensor's table work.
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
    /// `entry.asked` is the digest of the pending request, which was sent in full.
    bool asked_known = false;
  };

  /// names_.find(name), mu_ held; tries the place that followed the last one filled first.
  uint32_t find_place(const std::string& name) const;
  /// The place for `name`, whose place in names_ is `at` (or NameIndex::kNone), mu_ held: its
  /// own when idle, a new one otherwise; kNoLocalTag if a tensor of that name is still
  /// pending (`*pending_op`: its op).
  uint32_t place_for(const std::string& name, uint32_t at, OpType* pending_op);
  /// Writes tensor `t` (part `part` of `n`) into place `at` (made pending) and its request,
  /// tagged, into the queue's reserved room (mu_ held).
  void fill(uint32_t at, TensorSubmit& t, int part, size_t n, SubmitCommon& common);
  /// The failure of enqueue() while the table stops or has stopped (mu_ held), or OK; sweeps
  /// idle names when due (sweep_idle_names()) before the submission's lookups.
  Status admit_locked(OpType op, const std::string& name);
  /// The failure of enqueue() for a name whose tensor is still pending (a `pending_op`).
  Status still_pending(OpType op, const std::string& name, OpType pending_op) const;
  /// Unbinds the names of idle places not filled since the last sweep and frees those places;
  /// enqueue() calls it once names_ has grown to sweep_at_, twice what the last sweep left
  /// (names used once, such as unnamed calls' numbered names, would otherwise pile up). A
  /// name submitted between two sweeps keeps its place (a model's parameters are submitted
  /// every step: dropping them made each step hash and insert them again).
  void sweep_idle_names();

  const int rank_;
  const int global_rank_;
  mutable std::mutex mu_;
  std::condition_variable wake_;  // the scheduler's thread waits on it (with mu_)
  NameIndex names_;               // guarded by mu_: name -> its place
  std::deque<Place> pool_;        // guarded by mu_, except the taken places' entries
  std::vector<uint32_t> free_;    // guarded by mu_
  size_t pending_count_ = 0;      // guarded by mu_: places in kPending
  size_t sweep_at_ = 1024;        // guarded by mu_: names_ size at which idle names are dropped
  std::vector<uint32_t> found_;   // guarded by mu_: enqueue()'s lookups of a group's names
  uint32_t last_placed_ = kNoLocalTag;  // guarded by mu_: the place enqueue() filled last
  std::vector<Request> new_requests_;   // guarded by mu_
  // The holder of the cycle's: the places take_entries() took, and their entries (read
  // through the pointer: pool_ itself may be growing under a user thread meanwhile), until
  // execute() returns.
  std::vector<std::pair<uint32_t, PendingTensor*>> taken_;
  bool shutdown_requested_ = false;  // guarded by mu_
  bool sleeping_ = false;  // guarded by mu_: the scheduler waits on wake_ (enqueue notifies)
  // Guarded by mu_: the scheduler's thread waits on wake_ while user threads drive the
  // cycles; new work needs no wake-up then (a driver takes it), only the last driver's.
  bool parked_ = false;
  // Set with new_requests_ (under mu_), read without it by the idle thread's poll.
  std::atomic<bool> has_new_{false};
  std::atomic<uint64_t> enqueued_{0};  // mu_ to write: submissions so far (settle() reads it)
  Status stop_status_;                 // guarded by mu_
  std::atomic<bool> stopped_{false};
};

}  // namespace hvd
