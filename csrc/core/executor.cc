// Copyright horovod_cpp authors.
#include "core/executor.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <new>
#include <stdexcept>

#include "common/logging.h"
#include "core/timeline.h"
#include "fusion/fusion_planner.h"

namespace hvd {
namespace {

// Completes the handles of one batch from the outcome its transport reports. Holds the handles
// (not the entries): the transport keeps nothing of the core.
struct Completion {
  // Per tensor: its handle (null where not present) and its part of that handle.
  std::vector<std::pair<std::shared_ptr<detail::HandleState>, int>> parts;

  void operator()(BatchOutcome out) const {
    // Last to first: a caller waits on its handles in submission order, so it wakes once,
    // when the first completes, and finds the rest done, instead of waking (and taking the
    // CPU from this thread) for each one.
    for (size_t k = parts.size(); k-- > 0;) {
      const std::shared_ptr<detail::HandleState>& h = parts[k].first;
      if (!h) continue;
      if (k < out.results.size()) {
        TensorResult& r = out.results[k];
        if (r.has_tensor) h->set_result(parts[k].second, std::move(r.tensor));
        if (!r.splits.empty()) h->set_splits(parts[k].second, std::move(r.splits));
      }
      h->complete(out.status);
    }
  }
};

// The batch's completion, shared between the callback the transport owns and the executor,
// which must still complete the handles when the transport throws instead of reporting.
// Whoever comes first completes them, exactly once.
struct SharedCompletion {
  Completion completion;
  std::atomic<bool> called{false};
  void operator()(BatchOutcome out) {
    if (!called.exchange(true, std::memory_order_acq_rel)) completion(std::move(out));
  }
};

}  // namespace

std::string describe_current_exception() {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return "out of memory (std::bad_alloc)";
  } catch (const std::exception& e) {
    return std::string("exception: ") + e.what();
  } catch (...) {
    return "an exception of unknown type";
  }
}

void Executor::execute(const std::vector<Response>& responses, const TakeEntries& take, bool joined) {
  if (responses.empty()) return;
  const std::vector<FusionBatch>& plan = planner_.plan(responses, threshold_);
  std::vector<PendingTensor*>& all_entries = entries_;  // refilled every cycle
  take(responses, &all_entries);
  const bool traced = timeline_ && timeline_->enabled();
  for (const FusionBatch& fb : plan) {
    const size_t m = fb.members.size();
    // The last batch's room, every field overwritten below (value-initializing a thousand
    // tensors each cycle was 2% of a tiny tensor's cost).
    Batch b = std::move(spare_);
    b.tensors.resize(m);
    Completion done;
    done.parts.swap(spare_parts_);
    done.parts.resize(m);
    bool diverged = false;
    for (size_t k = 0; k < m; ++k) {
      const size_t i = fb.members[k];
      const Response& r = responses[i];
      PendingTensor* e = all_entries[i];
      BatchTensor& t = b.tensors[k];
      t.name = &r.name;
      t.count = num_elements(r.shape);
      t.bytes = saturating_mul(t.count, static_cast<int64_t>(dtype_size(r.dtype)));
      t.present = e != nullptr;
      if (t.present) {
        t.input = std::move(e->input);  // the entry is not used again
        t.output = std::move(e->output);
        done.parts[k] = {std::move(e->handle), e->part};
      } else {
        t.input = t.output = TensorView();
      }
      // A joined rank legitimately lacks entries: it runs allreduces with zeros and has no
      // handle to fail. Otherwise the coordinator only answers names this rank submitted.
      if (!t.present && !(joined && (!r.ok() || r.op == OpType::kAllreduce))) {
        HVD_LOG(kError) << "internal error: response for '" << r.name
                        << "' which this rank has not submitted";
        diverged = true;
      }
    }
    const Response& r0 = responses[fb.members.front()];
    if (diverged) {
      done({Status::Backend("internal error: the ranks' views of pending tensors diverged"), {}});
      continue;
    }
    if (!r0.ok()) {
      done({Status::Mismatch(r0.error), {}});
      continue;
    }
    if (r0.op == OpType::kJoin) {  // negotiation only: the value is the last rank to join
      if (done.parts[0].first) done.parts[0].first->set_value(r0.root);
      done({Status::OK(), {}});
      continue;
    }
    describe_batch(r0, fb, &b);
    if (traced) {
      Timeline* tl = timeline_;
      b.phase = [tl](const std::string& tensor, const char* phase, int64_t t0, int64_t t1,
                     const std::string& args) { tl->phase(tensor, phase, t0, t1, args); };
    } else {
      b.phase = nullptr;
    }
    Transport* t = transports_->select(b);
    if (!t) {
      const std::string what = std::string(op_type_name(r0.op)) + " '" + r0.name + "'";
      done({r0.device.is_cuda()
                ? Status::InvalidArgument(what + ": CUDA tensors need a build of horovod_cpp with NCCL")
                : Status::InvalidArgument(what + ": no transport takes tensors on " +
                                          r0.device.str() + " (" + transports_->describe() + ")"),
            {}});
      continue;
    }
    auto shared = std::make_shared<SharedCompletion>();
    shared->completion = std::move(done);
    b.done = [shared](BatchOutcome out) { (*shared)(std::move(out)); };
    try {
      t->run(b);
    } catch (...) {
      // A transport that throws (out of memory for a result, a bug) leaves the other ranks
      // inside or before this collective: the handles fail here, naming what and where, and
      // the exception ends this set's thread (ProcessSetState reports it as fatal).
      const size_t more = fb.members.size() - 1;
      const std::string what = std::string(op_type_name(r0.op)) + " '" + r0.name + "'" +
                               (more ? " (fused with " + std::to_string(more) + " more)" : "") +
                               " failed in transport '" + t->name() + "': " +
                               describe_current_exception();
      (*shared)({Status::Backend(what + "; this process set stops"), {}});
      throw std::runtime_error(what);
    }
    if (!b.tensors.empty()) {  // finished before returning (Transport::run): keep the room
      b.done = nullptr;        // and the elements (their views are moved-from)
      spare_ = std::move(b);
      shared->completion.parts.clear();  // done was called: the handles are complete
      spare_parts_.swap(shared->completion.parts);
    }
  }
}

void Executor::describe_batch(const Response& r0, const FusionBatch& fb, Batch* b) const {
  b->op = r0.op;
  b->dtype = r0.dtype;
  b->device = r0.device;
  b->bytes = fb.fused() ? fb.bytes : r0.nbytes_for_rank(0);
  b->offsets = fb.offsets;  // copied into the kept room
  b->reduction = make_reduction_spec(r0.reduce_op, r0.dtype, r0.prescale, r0.postscale,
                                     static_cast<int>(global_ranks_.size()));
  b->global_root = r0.root;
  b->root = r0.op == OpType::kBroadcast ? set_rank_of(r0.root) : -1;
  // The row-shaped collectives (never fused) divide dimension 0 among the members.
  const bool rows =
      r0.op == OpType::kAllgather || r0.op == OpType::kAlltoall || r0.op == OpType::kReducescatter;
  if (rows) {
    b->shape = r0.shape;
  } else {
    b->shape.clear();
  }
  b->first_dims.clear();
  b->rank_bytes.clear();
  b->all_splits.clear();
  if (r0.op == OpType::kAllgather) {
    b->first_dims = r0.first_dims;
    b->rank_bytes.resize(r0.first_dims.size());
    for (size_t k = 0; k < b->rank_bytes.size(); ++k) {
      b->rank_bytes[k] = r0.nbytes_for_rank(static_cast<int>(k));
    }
  } else if (r0.op == OpType::kAlltoall) {
    b->all_splits = r0.all_splits;
  }
}

int Executor::set_rank_of(int global_rank) const {
  auto it = std::find(global_ranks_.begin(), global_ranks_.end(), global_rank);
  return it == global_ranks_.end() ? -1 : static_cast<int>(it - global_ranks_.begin());
}

}  // namespace hvd
