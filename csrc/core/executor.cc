// Copyright horovod_cpp authors.
#include "core/executor.h"

#include <cstring>

#include "backends/cpu/cpu_ops.h"
#include "common/logging.h"
#include "fusion/fusion_planner.h"

namespace hvd {

void Executor::execute(const std::vector<Response>& responses, const TakeEntry& take) {
  const std::vector<FusionBatch> plan = plan_fusion(responses, threshold_);
  for (const FusionBatch& batch : plan) {
    std::vector<TensorEntry> entries(batch.members.size());
    std::vector<const Response*> rs;
    bool all_found = true;
    for (size_t k = 0; k < batch.members.size(); ++k) {
      const Response& r = responses[batch.members[k]];
      rs.push_back(&r);
      if (!take(r.name, &entries[k])) {
        // Cannot happen unless ranks diverged: the coordinator only answers submitted names.
        HVD_LOG(kError) << "internal error: response for '" << r.name
                        << "' which this rank has not submitted";
        all_found = false;
      }
    }
    if (!all_found) {
      for (auto& e : entries) {
        if (e.handle) e.handle->complete(Status::Backend("internal error: ranks diverged"));
      }
      continue;
    }
    Status s;
    const Response& r0 = *rs.front();
    if (!r0.ok()) {
      s = Status::Mismatch(r0.error);
    } else if (batch.fused()) {
      std::vector<TensorEntry*> es;
      for (auto& e : entries) es.push_back(&e);
      s = allreduce_fused(rs, es, batch.offsets, batch.bytes);
    } else {
      switch (r0.op) {
        case OpType::kAllreduce: s = allreduce_one(r0, entries[0]); break;
        case OpType::kAllgather: s = allgather(r0, entries[0]); break;
        case OpType::kBroadcast:
          s = plane_->broadcast(entries[0].output.data, entries[0].output.nbytes(), r0.root);
          break;
        case OpType::kBarrier: s = plane_->barrier(); break;
      }
      if (!s.ok()) s = Status(s.code(), std::string(op_type_name(r0.op)) + " '" + r0.name + "': " + s.message());
    }
    for (auto& e : entries) e.handle->complete(s);
  }
}

Status Executor::reduce_buffer(void* buf, int64_t count, const Response& r) {
  const bool fp = is_floating_point(r.dtype);
  if (fp) scale_buffer(buf, count, r.dtype, r.prescale);
  HVD_RETURN_IF_ERROR(plane_->allreduce(buf, count, r.dtype, r.reduce_op));
  if (fp) {
    double post = r.postscale;
    if (r.reduce_op == ReduceOp::kAverage) post /= static_cast<double>(size_);
    scale_buffer(buf, count, r.dtype, post);
  } else if (r.reduce_op == ReduceOp::kAverage && r.dtype != DataType::kBool) {
    divide_integers(buf, count, r.dtype, size_);
  }
  return Status::OK();
}

Status Executor::allreduce_one(const Response& r, TensorEntry& e) {
  // No fusion: reduce straight in the output tensor, no copy (out of place: one copy in).
  if (e.output.data != e.input.data) {
    std::memcpy(e.output.data, e.input.data, static_cast<size_t>(e.input.nbytes()));
  }
  return reduce_buffer(e.output.data, e.output.numel(), r);
}

Status Executor::allreduce_fused(const std::vector<const Response*>& rs,
                                 std::vector<TensorEntry*>& es,
                                 const std::vector<int64_t>& offsets, int64_t bytes) {
  if (static_cast<int64_t>(fusion_buffer_.size()) < bytes) {
    fusion_buffer_.resize(static_cast<size_t>(bytes));
  }
  unsigned char* buf = fusion_buffer_.data();
  for (size_t k = 0; k < es.size(); ++k) {
    std::memcpy(buf + offsets[k], es[k]->input.data, static_cast<size_t>(es[k]->input.nbytes()));
  }
  const int64_t count = bytes / static_cast<int64_t>(dtype_size(rs[0]->dtype));
  Status s = reduce_buffer(buf, count, *rs[0]);
  if (!s.ok()) {
    std::string names;
    for (size_t k = 0; k < rs.size() && k < 8; ++k) names += (k ? ", '" : "'") + rs[k]->name + "'";
    return Status(s.code(), "fused allreduce of " + names + (rs.size() > 8 ? ", ..." : "") + ": " +
                                s.message());
  }
  for (size_t k = 0; k < es.size(); ++k) {
    std::memcpy(es[k]->output.data, buf + offsets[k], static_cast<size_t>(es[k]->output.nbytes()));
  }
  return Status::OK();
}

Status Executor::allgather(const Response& r, TensorEntry& e) {
  Shape out_shape = r.shape;
  int64_t rows = 0;
  for (int64_t d : r.first_dims) rows += d;
  out_shape[0] = rows;
  Tensor out(r.dtype, out_shape);
  std::vector<int64_t> bytes(r.first_dims.size());
  for (size_t k = 0; k < bytes.size(); ++k) bytes[k] = r.nbytes_for_rank(static_cast<int>(k));
  HVD_RETURN_IF_ERROR(plane_->allgatherv(e.input.data, out.data(), bytes));
  e.handle->set_result(std::move(out));
  return Status::OK();
}

}  // namespace hvd
