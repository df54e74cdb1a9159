// Copyright horovod_cpp authors.
#include "core/executor.h"

#include <algorithm>
#include <cstring>

#include "backends/cpu/cpu_ops.h"
#include "common/logging.h"
#include "backends/shm/shm_allreduce.h"
#include "core/timeline.h"
#include "fusion/fusion_planner.h"

namespace hvd {

void Executor::execute(const std::vector<Response>& responses, const TakeEntries& take, bool joined) {
  if (responses.empty()) return;
  const std::vector<FusionBatch> plan = plan_fusion(responses, threshold_);
  std::vector<TensorEntry> all_entries;
  std::vector<bool> all_present;
  take(responses, &all_entries, &all_present);
  for (const FusionBatch& batch : plan) {
    const size_t m = batch.members.size();
    std::vector<TensorEntry> entries(m);
    std::vector<bool> present(m);
    std::vector<const Response*> rs(m);
    bool diverged = false;
    for (size_t k = 0; k < m; ++k) {
      rs[k] = &responses[batch.members[k]];
      entries[k] = std::move(all_entries[batch.members[k]]);
      present[k] = all_present[batch.members[k]];
      // A joined rank legitimately lacks entries: it runs allreduces with zeros and has no
      // handle to fail. Otherwise the coordinator only answers names this rank submitted.
      if (!present[k] && !(joined && (!rs[k]->ok() || rs[k]->op == OpType::kAllreduce))) {
        HVD_LOG(kError) << "internal error: response for '" << rs[k]->name
                        << "' which this rank has not submitted";
        diverged = true;
      }
    }
    Status s;
    const Response& r0 = *rs.front();
    const bool traced = timeline_ && timeline_->enabled();
    const int64_t t0 = traced ? now_us() : 0;
    if (diverged) {
      s = Status::Backend("internal error: the ranks' views of pending tensors diverged");
    } else if (!r0.ok()) {
      s = Status::Mismatch(r0.error);
    } else if (r0.device.is_cuda()) {
      // CUDA tensors: the device runner enqueues the batch on its stream and completes the
      // handles itself once the GPU is done (core/device_runner.h).
      if (device_runner_) {
        device_runner_->run(batch, rs, entries, present, joined);
        continue;
      }
      s = Status::InvalidArgument(std::string(op_type_name(r0.op)) + " '" + r0.name +
                                  "': CUDA tensors need a build of horovod_cpp with NCCL");
    } else if (shm_ && r0.op == OpType::kAllreduce && r0.device.is_cpu() &&
               (batch.fused() ? batch.bytes : r0.nbytes_for_rank(0)) >= shm_min_bytes_) {
      s = allreduce_shm(rs, entries, present);
      if (traced) {
        const int64_t t1 = now_us();
        for (const Response* r : rs) timeline_->phase(r->name, "SHM_ALLREDUCE", t0, t1);
      }
    } else if (batch.fused()) {
      s = allreduce_fused(rs, entries, present, batch.offsets, batch.bytes);
    } else {
      s = run_single(r0, entries[0], present[0]);
      if (!s.ok()) {
        s = Status(s.code(), std::string(op_type_name(r0.op)) + " '" + r0.name + "': " + s.message());
      }
    }
    if (traced && r0.ok() && !batch.fused() && !(shm_ && r0.op == OpType::kAllreduce &&
                                                  r0.device.is_cpu() &&
                                                  r0.nbytes_for_rank(0) >= shm_min_bytes_)) {
      const std::string op = std::string("MPI_") + op_type_name(r0.op);
      timeline_->phase(r0.name, op.c_str(), t0, now_us());
    }
    for (size_t k = 0; k < m; ++k) {
      if (present[k]) entries[k].handle->complete(s);
    }
  }
}

Status Executor::run_single(const Response& r, TensorEntry& e, bool present) {
  switch (r.op) {
    case OpType::kAllreduce: return allreduce_one(r, e, present);
    case OpType::kAllgather: return allgather(r, e);
    case OpType::kBroadcast:
      return plane_->broadcast(e.output.data, e.output.nbytes(), set_rank_of(r.root));
    case OpType::kBarrier: return plane_->barrier();
    case OpType::kAlltoall: return alltoall(r, e);
    case OpType::kReducescatter: return reducescatter(r, e);
    case OpType::kJoin:
      e.handle->set_value(r.root);
      return Status::OK();
  }
  return Status::Backend("unknown operation");
}

int Executor::set_rank_of(int global_rank) const {
  auto it = std::find(global_ranks_.begin(), global_ranks_.end(), global_rank);
  return it == global_ranks_.end() ? -1 : static_cast<int>(it - global_ranks_.begin());
}

unsigned char* Executor::scratch(int64_t bytes) {
  if (static_cast<int64_t>(scratch_.size()) < bytes) scratch_.resize(static_cast<size_t>(bytes));
  return scratch_.data();
}

Status Executor::reduce_buffer(void* buf, int64_t count, const Response& r) {
  // Integers are scaled too when a factor is given (in double, truncated, as Horovod does);
  // without one, their Average divides exactly.
  const bool scaled = is_floating_point(r.dtype) || r.postscale != 1.0;
  scale_buffer(buf, count, r.dtype, r.prescale);
  HVD_RETURN_IF_ERROR(plane_->allreduce(buf, count, r.dtype, r.reduce_op));
  if (scaled) {
    double post = r.postscale;
    if (r.reduce_op == ReduceOp::kAverage) post /= static_cast<double>(size_);
    scale_buffer(buf, count, r.dtype, post);
  } else if (r.reduce_op == ReduceOp::kAverage && r.dtype != DataType::kBool) {
    divide_integers(buf, count, r.dtype, size_);
  }
  return Status::OK();
}

// Shared memory reduces the tensors where they are: no fusion buffer, and Average/postscale
// are applied while the result is written.
Status Executor::allreduce_shm(const std::vector<const Response*>& rs, std::vector<TensorEntry>& es,
                               const std::vector<bool>& present) {
  const Response& r0 = *rs.front();
  const bool fp = is_floating_point(r0.dtype);
  int64_t absent_bytes = 0;
  for (size_t k = 0; k < es.size(); ++k) {
    if (!present[k]) absent_bytes += rs[k]->nbytes_for_rank(0);
  }
  unsigned char* zeros = absent_bytes ? scratch(absent_bytes) : nullptr;
  if (zeros) std::memset(zeros, 0, static_cast<size_t>(absent_bytes));
  std::vector<Segment> segs;
  segs.reserve(es.size());
  for (size_t k = 0; k < es.size(); ++k) {
    const int64_t count = num_elements(rs[k]->shape);
    if (!present[k]) {  // joined: zeros in, result dropped
      segs.push_back({zeros, count});
      zeros += count * static_cast<int64_t>(dtype_size(r0.dtype));
      continue;
    }
    TensorEntry& e = es[k];
    if (e.output.data != e.input.data) {
      std::memcpy(e.output.data, e.input.data, static_cast<size_t>(e.input.nbytes()));
    }
    scale_buffer(e.output.data, count, r0.dtype, r0.prescale);
    segs.push_back({e.output.data, count});
  }
  double scale = r0.postscale;
  int64_t divisor = 1;
  if (r0.reduce_op == ReduceOp::kAverage) {
    scale /= static_cast<double>(size_);
    divisor = size_;
  }
  if (!fp) {  // integers: scaled (in double) only when a postscale factor is given
    if (r0.postscale == 1.0) {
      scale = 1.0;
    } else {
      divisor = 1;
    }
  }
  Status s = shm_->allreduce(segs, r0.dtype, r0.reduce_op, scale, divisor);
  if (!s.ok()) {
    return Status(s.code(), "allreduce '" + r0.name + "'" + (rs.size() > 1 ? " (fused)" : "") +
                                ": " + s.message());
  }
  return Status::OK();
}

Status Executor::allreduce_one(const Response& r, TensorEntry& e, bool present) {
  const int64_t count = num_elements(r.shape);
  if (!present) {  // joined: zeros in, result dropped
    const int64_t bytes = count * static_cast<int64_t>(dtype_size(r.dtype));
    unsigned char* z = scratch(bytes);
    std::memset(z, 0, static_cast<size_t>(bytes));
    return reduce_buffer(z, count, r);
  }
  // No fusion: reduce straight in the output tensor, no copy (out of place: one copy in).
  if (e.output.data != e.input.data) {
    std::memcpy(e.output.data, e.input.data, static_cast<size_t>(e.input.nbytes()));
  }
  return reduce_buffer(e.output.data, count, r);
}

Status Executor::allreduce_fused(const std::vector<const Response*>& rs,
                                 std::vector<TensorEntry>& es, const std::vector<bool>& present,
                                 const std::vector<int64_t>& offsets, int64_t bytes) {
  if (static_cast<int64_t>(fusion_buffer_.size()) < bytes) {
    fusion_buffer_.resize(static_cast<size_t>(bytes));
  }
  unsigned char* buf = fusion_buffer_.data();
  const bool traced = timeline_ && timeline_->enabled();
  const int64_t t0 = traced ? now_us() : 0;
  for (size_t k = 0; k < es.size(); ++k) {
    const size_t n = static_cast<size_t>(rs[k]->nbytes_for_rank(0));
    if (present[k]) {
      std::memcpy(buf + offsets[k], es[k].input.data, n);
    } else {
      std::memset(buf + offsets[k], 0, n);
    }
  }
  const int64_t count = bytes / static_cast<int64_t>(dtype_size(rs[0]->dtype));
  const int64_t t1 = traced ? now_us() : 0;
  Status s = reduce_buffer(buf, count, *rs[0]);
  const int64_t t2 = traced ? now_us() : 0;
  if (!s.ok()) {
    std::string names;
    for (size_t k = 0; k < rs.size() && k < 8; ++k) names += (k ? ", '" : "'") + rs[k]->name + "'";
    return Status(s.code(), "fused allreduce of " + names + (rs.size() > 8 ? ", ..." : "") + ": " +
                                s.message());
  }
  for (size_t k = 0; k < es.size(); ++k) {
    if (!present[k]) continue;
    std::memcpy(es[k].output.data, buf + offsets[k], static_cast<size_t>(es[k].output.nbytes()));
  }
  if (traced) {
    const int64_t t3 = now_us();
    const std::string args = "\"fused_tensors\":" + std::to_string(rs.size()) +
                             ",\"fused_bytes\":" + std::to_string(bytes);
    for (const Response* r : rs) {
      timeline_->phase(r->name, "MEMCPY_IN_FUSION_BUFFER", t0, t1);
      timeline_->phase(r->name, "MPI_ALLREDUCE", t1, t2, args);
      timeline_->phase(r->name, "MEMCPY_OUT_FUSION_BUFFER", t2, t3);
    }
  }
  return Status::OK();
}

Status Executor::allgather(const Response& r, TensorEntry& e) {
  Shape out_shape = r.shape;
  int64_t rows = 0;
  for (int64_t d : r.first_dims) rows += d;
  out_shape[0] = rows;
  Tensor out = Tensor::empty(r.dtype, out_shape);  // every byte is written below
  std::vector<int64_t> bytes(r.first_dims.size());
  for (size_t k = 0; k < bytes.size(); ++k) bytes[k] = r.nbytes_for_rank(static_cast<int>(k));
  HVD_RETURN_IF_ERROR(plane_->allgatherv(e.input.data, out.data(), bytes));
  e.handle->set_result(e.part, std::move(out));
  return Status::OK();
}

Status Executor::alltoall(const Response& r, TensorEntry& e) {
  const size_t n = static_cast<size_t>(size_);
  const int64_t row_bytes =
      num_elements(Shape(r.shape.begin() + 1, r.shape.end())) * static_cast<int64_t>(dtype_size(r.dtype));
  std::vector<int64_t> send(n), recv(n), recv_rows(n);
  int64_t rows = 0;
  for (size_t k = 0; k < n; ++k) {
    send[k] = r.all_splits[static_cast<size_t>(rank_) * n + k] * row_bytes;
    recv_rows[k] = r.all_splits[k * n + static_cast<size_t>(rank_)];
    recv[k] = recv_rows[k] * row_bytes;
    rows += recv_rows[k];
  }
  Shape out_shape = r.shape;
  out_shape[0] = rows;
  Tensor out = Tensor::empty(r.dtype, out_shape);  // every byte is written below
  HVD_RETURN_IF_ERROR(plane_->alltoallv(e.input.data, send, out.data(), recv));
  e.handle->set_result(e.part, std::move(out));
  e.handle->set_splits(e.part, std::move(recv_rows));
  return Status::OK();
}

Status Executor::reducescatter(const Response& r, TensorEntry& e) {
  // Rows of dimension 0 are dealt out evenly; the first dim0 % size ranks get one more.
  const int64_t dim0 = r.shape.at(0);
  const int64_t row = num_elements(Shape(r.shape.begin() + 1, r.shape.end()));
  std::vector<int64_t> counts(static_cast<size_t>(size_));
  for (int k = 0; k < size_; ++k) counts[static_cast<size_t>(k)] = (dim0 / size_ + (k < dim0 % size_ ? 1 : 0)) * row;
  Shape out_shape = r.shape;
  out_shape[0] = counts[static_cast<size_t>(rank_)] / std::max<int64_t>(row, 1);
  if (row == 0) out_shape[0] = dim0 / size_ + (rank_ < dim0 % size_ ? 1 : 0);
  Tensor out = Tensor::empty(r.dtype, out_shape);  // every byte is written below
  const int64_t total = num_elements(r.shape);
  const int64_t bytes = total * static_cast<int64_t>(dtype_size(r.dtype));
  unsigned char* in = scratch(bytes);
  std::memcpy(in, e.input.data, static_cast<size_t>(bytes));
  scale_buffer(in, total, r.dtype, r.prescale);
  HVD_RETURN_IF_ERROR(plane_->reducescatter(in, out.data(), counts, r.dtype, r.reduce_op));
  const int64_t mine = counts[static_cast<size_t>(rank_)];
  if (is_floating_point(r.dtype) || r.postscale != 1.0) {  // integers: as in reduce_buffer
    double post = r.postscale;
    if (r.reduce_op == ReduceOp::kAverage) post /= static_cast<double>(size_);
    scale_buffer(out.data(), mine, r.dtype, post);
  } else if (r.reduce_op == ReduceOp::kAverage) {
    divide_integers(out.data(), mine, r.dtype, size_);
  }
  e.handle->set_result(e.part, std::move(out));
  return Status::OK();
}

}  // namespace hvd
