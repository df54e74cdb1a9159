// Copyright horovod_cpp authors.
#include "core/submission.h"

#include <algorithm>

#include "common/block_pool.h"
#include "common/logging.h"
#include "core/timeline.h"
#include "horovod_cpp_build_config.h"

namespace hvd {
namespace {

// The input `t` (its shape not yet moved) of tensor `q`.
void check_input(const TensorSubmit& q, const TensorView& t) {
  const char* role = "input";
  if (negative_dimension(t.shape)) {
    throw InvalidArgumentError(describe(q) + ": " + role + " has a negative dimension " +
                               shape_str(t.shape));
  }
  if (data_missing(t.data, t.shape)) {
    throw InvalidArgumentError(describe(q) + ": " + role + " data pointer is null");
  }
  if (t.device.is_cuda() && !HOROVOD_CPP_HAVE_NCCL) {  // NCCL builds: the device check below
    throw InvalidArgumentError(describe(q) + ": " + role + " is on " + t.device.str() +
                               (HOROVOD_CPP_HAVE_CUDA
                                    ? "; CUDA tensors need a build of horovod_cpp with NCCL"
                                    : " but this build of horovod_cpp has no CUDA support"));
  }
}

// Members are copied into a group's per-thread lists of this size or less kept for the
// thread's next group.
constexpr size_t kSpareMembers = 1024;

}  // namespace

std::string describe(const TensorSubmit& t) {
  return std::string(op_type_name(t.op)) + " '" + *t.name + "'";
}

void refuse_reduction(const TensorSubmit& q, ReduceOp op) {
  const DataType dtype = q.input->dtype;
  if (dtype == DataType::kBool && op == ReduceOp::kAverage) {
    throw InvalidArgumentError(describe(q) + ": op average is not defined for bool tensors");
  }
  if (op == ReduceOp::kAdasum && !is_floating_point(dtype)) {
    throw InvalidArgumentError(describe(q) +
                               ": op adasum needs a floating-point tensor (float16, "
                               "bfloat16, float32, float64), not " +
                               dtype_name(dtype));
  }
  throw InvalidArgumentError(describe(q) +
                             ": prescale_factor/postscale_factor need a "
                             "floating-point tensor" +
                             (dtype == DataType::kBool ? "" : " on a CUDA device") + ", not " +
                             dtype_name(dtype));
}

void check_not_scalar(const TensorSubmit& q) {
  if (q.input->shape.empty()) {
    throw InvalidArgumentError(describe(q) +
                               ": needs at least one dimension (got a scalar; "
                               "give it shape [1])");
  }
}

void Submission::find_set(const char* what, int set_id) {
  Status s = rt_->find_set(set_id, &held_set_);
  if (!s.ok()) throw InvalidArgumentError(std::string(what) + ": " + s.message());
  set_ = held_set_.get();
}

void Submission::release_room() {
  // Emptied for the thread's next submission, keeping the lists' room (a large group's
  // views are not worth keeping).
  Room& r = *room_;
  r.items.clear();
  r.views.clear();
  r.names.clear();
  r.unnamed.clear();
  r.splits.clear();
  if (r.views.capacity() > kSpareMembers) {
    std::vector<TensorView>().swap(r.views);
    std::vector<TensorSubmit>().swap(r.items);
  }
  if (r.seen_used) r.seen.clear();
  r.seen_used = false;
}

Submission::Room& Submission::thread_room() {
  thread_local Room r;
  return r;
}

void Submission::begin_group(size_t n) {
  Room& r = room();
  r.items.reserve(n);  // the members and names point into these: no reallocation after this
  r.views.reserve(n);
  r.names.reserve(n);
  grouped_ = true;
}

TensorSubmit& Submission::add_member(OpType op, const std::string& name, const TensorView& t) {
  Room& r = *room_;
  const bool duplicate = !name.empty() && !unique_name(name);
  if (duplicate) {
    r.dropped_view = t;
    r.dropped = TensorSubmit(op, &name, &r.dropped_view, nullptr);
    note_error(describe(r.dropped) + ": the name appears twice in the group");
    return r.dropped;
  }
  const size_t index = r.items.size();
  TensorView* view = &r.views.emplace_back(t);
  TensorSubmit& m = r.items.emplace_back(op, &name, view, nullptr);
  if (name.empty()) m.name = unnamed(op, index);
  items_ = r.items.data();
  n_ = r.items.size();
  checked(m);
  return m;
}

Handle Submission::submit(const std::string& handle_name) {
  // Unnamed calls are numbered here, every call, rejected or not: a call rejected on one
  // rank is still sent (marked failed) and pairs with the other ranks' same call.
  bool numbered = false;
  if (room_ != nullptr) {
    for (size_t k = 0; k < room_->unnamed.size(); ++k) {
      room_->names[k] = set_->auto_name(items_[room_->unnamed[k]].op);
      numbered = true;
    }
  }
  SubmitCommon common;
  if (grouped_) {
    room_->group_key = group_key();
    common.group = &room_->group_key;
  }
  if (!error_.empty()) {
    // Sent anyway, marked failed: every other rank's matching call fails naming this rank
    // and the reason, instead of waiting for a tensor this rank will never send. The handle
    // behind them is this call's own, which nobody waits on.
    common.handle = std::make_shared<detail::HandleState>(*items_[0].name, static_cast<int>(n_));
    common.error = &error_;
    for (size_t i = 0; i < n_; ++i) {
      items_[i].input->data = nullptr;
      items_[i].input->stream = nullptr;
      items_[i].output = nullptr;
    }
    Status sent = set_->enqueue(items_, n_, common);
    if (!sent.ok()) {
      HVD_LOG(kDebug) << "a locally failed submission was not sent: " << sent.message();
    }
    throw InvalidArgumentError(error_);
  }
  auto state = make_pooled<detail::HandleState>(numbered ? *items_[0].name : handle_name,
                                                static_cast<int>(n_));
  state->set_driver(set_->as_driver());  // an untimed wait runs the set's cycles itself
  common.handle = state;
  common.enqueue_us = rt_->timeline()->enabled() ? now_us() : 0;
  throw_if_error(set_->enqueue(items_, n_, common));
  state_ = state.get();
  return Handle(std::move(state));  // moved, not copied: each reference count is an atomic
}

const std::string* Submission::unnamed(OpType op, size_t index) {
  Room& r = room();
  r.unnamed.push_back(index);
  std::string* storage = &r.names.emplace_back();
  *storage = std::string(op_type_name(op)) + ".noname";
  return storage;
}

void Submission::checked_slow(TensorSubmit& t) {
  check([&] { check_input(t, *t.input); });
  if (t.input->device.is_cuda()) {
    // The transport that takes CUDA tensors says whether this one is usable (NCCL: it must
    // be on this rank's GPU, docs/gpu.md). A failed device check goes through the
    // negotiation like every local error.
    Status dev = set_->transports().check_device(t.input->device, describe(t));
    if (!dev.ok()) note_error(dev.message());
  }
}

// A key that every rank derives alike from the op, the group's size and the members'
// names (FNV-1a over them), so requests stay small however large the group: 15
// characters, which std::string holds without an allocation (every member carries a copy,
// and a thousand-member group's longer keys cost a malloc per member per step).
std::string Submission::group_key() const {
  uint64_t h = 1469598103934665603ull;
  const auto mix = [&h](unsigned char c) { h = (h ^ c) * 1099511628211ull; };
  mix(static_cast<unsigned char>(items_[0].op));
  for (size_t n = n_; n > 0; n >>= 8) mix(static_cast<unsigned char>(n & 0xff));
  for (size_t i = 0; i < n_; ++i) {
    for (unsigned char c : *items_[i].name) mix(c);
    mix(0);  // the terminating zero byte
  }
  static const char kHex[] = "0123456789abcdef";
  std::string key = "g";  // then the hash's low 56 bits in hex
  for (int shift = 52; shift >= 0; shift -= 4) key += kHex[(h >> shift) & 0xf];
  return key;
}

// The index of names is filled only when a second member is added.
bool Submission::unique_name(const std::string& name) {
  if (room_->items.empty()) return true;
  NameIndex& names = room_->seen;
  if (!room_->seen_used) {
    room_->seen_used = true;
    for (size_t i = 0; i < room_->items.size(); ++i) {
      if (std::find(room_->unnamed.begin(), room_->unnamed.end(), i) == room_->unnamed.end()) {
        names.insert(*room_->items[i].name, 0);
      }
    }
  }
  return names.insert(name, 0);
}

}  // namespace hvd
