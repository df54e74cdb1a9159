// Copyright horovod_cpp authors.
#include "core/tensor_table.h"

#include <algorithm>
#include <string>
#include <vector>

#include "coordination/controller.h"
#include "coordination/response_check.h"

namespace hvd {

std::string TensorTable::stop_reason() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stop_status_.message();
}

size_t TensorTable::bound_names() const {
  std::lock_guard<std::mutex> lk(mu_);
  return names_.size();
}

bool TensorTable::is_bound(const std::string& name) const {
  std::lock_guard<std::mutex> lk(mu_);
  return names_.find(name) != NameIndex::kNone;
}

Status TensorTable::admit_locked(OpType op, const std::string& name) {
  if (stopped_ || shutdown_requested_) {
    const std::string why =
        stop_status_.ok() ? "horovod_cpp is shutting down" : stop_status_.message();
    return Status::Shutdown(std::string(op_type_name(op)) + " '" + name + "' rejected: " + why);
  }
  // Swept before the lookups, so the places they find stay valid until used.
  if (names_.size() >= sweep_at_) sweep_idle_names();
  return Status::OK();
}

Status TensorTable::still_pending(OpType op, const std::string& name, OpType pending_op) const {
  return Status::InvalidArgument(std::string(op_type_name(op)) + " '" + name + "' on rank " +
                                 std::to_string(global_rank_) + ": a " + op_type_name(pending_op) +
                                 " of the same name is still pending; wait for it before reusing "
                                 "the name");
}

namespace {
// The place's views keep no shape (the request took it; batches are sized from the agreed
// response): the other fields are copied, and `to`'s shape is left empty. A TensorView's own
// assignment goes through Shape's general copy or move, 15-40 instructions per view.
[[gnu::always_inline]] inline void copy_shapeless(const TensorView& from, TensorView* to) {
  to->data = from.data;
  to->dtype = from.dtype;
  to->shape.clear();
  to->device = from.device;
  to->stream = from.stream;
}
}  // namespace

// Inlined into enqueue(): a call per tensor showed in the submission's instruction count.
[[gnu::always_inline]] inline void TensorTable::fill(uint32_t at, TensorSubmit& t, int part,
                                                     size_t n, SubmitCommon& common) {
  // Each field written once, in place: the request into the queue's room (a group's is
  // reserved by enqueue()), the views into the place the name had last time. The request
  // first: if its room cannot grow, the place is left as it was.
  Request& q = new_requests_.emplace_back();
  Place& p = pool_[at];
  p.state = PlaceState::kPending;
  p.used = true;
  ++pending_count_;
  if (last_placed_ != kNoLocalTag) pool_[last_placed_].next = at;
  last_placed_ = at;
  PendingTensor& e = p.entry;
  TensorView& in = *t.input;
  e.op = t.op;
  q.rank = rank_;
  q.op = t.op;
  q.name = *t.name;
  q.dtype = in.dtype;
  q.shape = std::move(in.shape);
  // Ranks negotiate "a CUDA tensor" without the ordinal: each uses its own device.
  q.device = in.device.is_cuda() ? Device{Device::Kind::kCUDA, -1} : in.device;
  q.reduce_op = t.reduce_op;
  q.prescale = t.prescale;
  q.postscale = t.postscale;
  q.root = t.root;
  if (t.splits) q.splits = std::move(*t.splits);
  if (common.group) {
    q.group = *common.group;
    q.group_size = static_cast<int32_t>(n);
  }
  if (common.error) q.error = *common.error;
  q.local_tag = at;
  q.cache_hint = p.cache_hint;
  p.asked_known = false;  // note_sent() makes the digest if the request goes in full
  copy_shapeless(in, &e.input);
  copy_shapeless(t.output ? *t.output : in, &e.output);
  e.handle = static_cast<size_t>(part) + 1 == n ? std::move(common.handle) : common.handle;
  e.part = part;
  e.enqueue_us = common.enqueue_us;
}

Status TensorTable::enqueue(TensorSubmit* tensors, size_t n, SubmitCommon& common) {
  std::unique_lock<std::mutex> lk(mu_);
  // The common case (running, no sweep due) decided inline: admit_locked() returns a Status
  // through a call.
  if (stopped_ || shutdown_requested_ || names_.size() >= sweep_at_) {
    HVD_RETURN_IF_ERROR(admit_locked(tensors[0].op, *tensors[0].name));
  }
  OpType pending_op = OpType::kAllreduce;
  if (n == 1) {  // one probe of the index
    TensorSubmit& t = tensors[0];
    const uint32_t at = place_for(*t.name, find_place(*t.name), &pending_op);
    if (at == kNoLocalTag) return still_pending(t.op, *t.name, pending_op);
    fill(at, t, 0, 1, common);  // its request first: if the queue cannot grow, nothing moved
  } else {
    // The queue's room first: if it cannot grow, nothing was taken. Grown geometrically (the
    // queue's vector is reused cycle after cycle, so this is rare).
    const size_t queued = new_requests_.size();
    if (new_requests_.capacity() - queued < n) {
      new_requests_.reserve(std::max(queued + n, 2 * new_requests_.capacity()));
    }
    found_.clear();  // each name probed once, checked for every member before any is placed
    for (size_t i = 0; i < n; ++i) {
      const uint32_t at = find_place(*tensors[i].name);
      if (at != NameIndex::kNone && pool_[at].state == PlaceState::kPending) {
        return still_pending(tensors[i].op, *tensors[i].name, pool_[at].entry.op);
      }
      found_.push_back(at);
    }
    for (size_t i = 0; i < n; ++i) {
      fill(place_for(*tensors[i].name, found_[i], &pending_op), tensors[i], static_cast<int>(i), n,
           common);
    }
  }
  // Written under mu_ only: a plain store, not a locked read-modify-write.
  enqueued_.store(enqueued_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  has_new_.store(true, std::memory_order_release);
  if (sleeping_) {
    // Notified after unlocking: a thread woken under the lock would only block on it again.
    lk.unlock();
    wake_.notify_one();
  }
  return Status::OK();
}

uint32_t TensorTable::find_place(const std::string& name) const {
  if (last_placed_ != kNoLocalTag) {
    const uint32_t guess = pool_[last_placed_].next;
    if (guess != kNoLocalTag) {
      const Place& p = pool_[guess];
      if (p.bound && p.name == name) return guess;  // bound: names_ maps `name` here
    }
  }
  return names_.find(name);
}

uint32_t TensorTable::place_for(const std::string& name, uint32_t at, OpType* pending_op) {
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

void TensorTable::sweep_idle_names() {
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

void TensorTable::take_entries(const std::vector<Response>& responses,
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

void TensorTable::recycle_taken() {
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

void TensorTable::request_shutdown() {
  std::lock_guard<std::mutex> lk(mu_);
  shutdown_requested_ = true;
  has_new_.store(true, std::memory_order_release);
  wake_.notify_one();
}

void TensorTable::stop(const Status& why) {
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
    wake_.notify_all();  // the thread exits (a user thread may have run the last cycle)
  }
  for (Orphan& o : orphans) {
    o.handle->complete(Status(why.code(), std::string(op_type_name(o.op)) + " '" + o.name +
                                              "' did not complete: " + why.message()));
  }
}

void TensorTable::check_responses(const std::vector<Response>& responses, bool joined,
                                  int set_size, std::vector<std::string>* problems) const {
  std::lock_guard<std::mutex> lk(mu_);
  for (size_t i = 0; i < responses.size(); ++i) {
    const Response& r = responses[i];
    if (!r.ok()) continue;
    const uint32_t at = names_.find(r.name);
    if (at == NameIndex::kNone || pool_[at].state != PlaceState::kPending) {
      // A joined rank runs allreduces it did not submit, with zeros (take_entries()).
      if (!(joined && r.op == OpType::kAllreduce)) {
        (*problems)[i] = "rank " + std::to_string(global_rank_) + " has not submitted it";
      }
      continue;
    }
    if (!pool_[at].asked_known) {
      // Only a request sent in full gets a fresh response: this one went as a cache bit.
      (*problems)[i] = "rank " + std::to_string(global_rank_) + " has not sent its request in full";
      continue;
    }
    const Status s = check_response_against_request(r, pool_[at].entry.asked_for(), rank_, set_size);
    if (!s.ok()) (*problems)[i] = s.message();
  }
}

void TensorTable::note_sent(const std::vector<Request>& requests) {
  std::lock_guard<std::mutex> lk(mu_);
  for (const Request& q : requests) {
    const uint32_t at = q.local_tag;
    if (at >= pool_.size() || pool_[at].state != PlaceState::kPending) continue;
    Place& p = pool_[at];
    p.entry.asked = digest_of(q);
    p.asked_known = true;
  }
}

}  // namespace hvd
