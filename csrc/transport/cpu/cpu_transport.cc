// Copyright horovod_cpp authors.
#include "transport/cpu/cpu_transport.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>

#include "kernels/host/cpu_ops.h"
#include "transport/row_layout.h"
#include "common/fatal.h"

namespace hvd {
namespace {

int64_t now_micros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string phase_prefix(const char* name) {
  std::string p(name);
  for (char& c : p) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return p + "_";
}

}  // namespace

CpuTransport::CpuTransport(std::unique_ptr<DataPlane> plane, SetLayout layout)
    : plane_(std::move(plane)), layout_(std::move(layout)), prefix_(phase_prefix(plane_->name())) {}

void CpuTransport::run(Batch& b) {
  BatchOutcome out;
  const Response& r0 = b.first();
  // Only the collectives that allocate a result need one slot per tensor (never fused).
  if (r0.op == OpType::kAllgather || r0.op == OpType::kAlltoall ||
      r0.op == OpType::kReducescatter) {
    out.results.resize(b.tensors.size());
  }
  const int64_t t0 = b.phase ? now_micros() : 0;
  out.status = run_batch(b, &out.results);
  if (b.phase && !b.fused()) {
    const std::string phase = prefix_ + op_type_name(r0.op);
    b.phase(r0.name, phase.c_str(), t0, now_micros(), "");
  }
  b.done(std::move(out));
}

Status CpuTransport::run_batch(Batch& b, std::vector<TensorResult>* results) {
  Status s = b.fused() ? allreduce_fused(b) : run_one(b, results);
  if (s.ok() || s.code() != ErrorCode::kBackend || !plane_->failures_are_fatal()) return s;
  report_fatal(s.message() + " (in the " + plane_->name() + " data plane)");
  return Status(s.code(), s.message() + "; the job ends (an error inside a collective is fatal)");
}

Status CpuTransport::run_one(Batch& b, std::vector<TensorResult>* results) {
  const Response& r = b.first();
  const BatchTensor& t = b.tensors.front();
  Status s;
  switch (r.op) {
    case OpType::kAllreduce: s = allreduce_one(b); break;
    case OpType::kAllgather: s = allgather(r, t, &(*results)[0]); break;
    case OpType::kBroadcast:
      s = b.root < 0 ? Status::InvalidArgument("root rank " + std::to_string(r.root) +
                                               " is not in the process set")
                     : plane_->broadcast(t.output.data, t.nbytes(), b.root);
      break;
    case OpType::kBarrier: s = plane_->barrier(); break;
    case OpType::kAlltoall: s = alltoall(r, t, &(*results)[0]); break;
    case OpType::kReducescatter: s = reducescatter(r, t, &(*results)[0]); break;
    case OpType::kJoin: s = Status::Backend("join is not a data-plane operation"); break;
  }
  if (!s.ok()) s = Status(s.code(), std::string(op_type_name(r.op)) + " '" + r.name + "': " + s.message());
  return s;
}

unsigned char* CpuTransport::scratch(int64_t bytes) {
  if (static_cast<int64_t>(scratch_.size()) < bytes) scratch_.resize(static_cast<size_t>(bytes));
  return scratch_.data();
}

Status CpuTransport::reduce_buffer(void* buf, int64_t count, const Response& r) {
  // Integers are scaled too when a factor is given (in double, truncated, as Horovod does);
  // without one, their Average divides exactly.
  const bool scaled = is_floating_point(r.dtype) || r.postscale != 1.0;
  scale_buffer(buf, count, r.dtype, r.prescale);
  HVD_RETURN_IF_ERROR(plane_->allreduce(buf, count, r.dtype, r.reduce_op));
  if (scaled) {
    double post = r.postscale;
    if (r.reduce_op == ReduceOp::kAverage) post /= static_cast<double>(layout_.size);
    scale_buffer(buf, count, r.dtype, post);
  } else if (r.reduce_op == ReduceOp::kAverage && r.dtype != DataType::kBool) {
    divide_integers(buf, count, r.dtype, layout_.size);
  }
  return Status::OK();
}

Status CpuTransport::allreduce_one(Batch& b) {
  const Response& r = b.first();
  BatchTensor& t = b.tensors.front();
  const int64_t count = num_elements(r.shape);
  if (!t.present) {  // joined: zeros in, result dropped
    const int64_t bytes = count * static_cast<int64_t>(dtype_size(r.dtype));
    unsigned char* z = scratch(bytes);
    std::memset(z, 0, static_cast<size_t>(bytes));
    return reduce_buffer(z, count, r);
  }
  // No fusion: reduce straight in the output tensor, no copy (out of place: one copy in).
  if (t.output.data != t.input.data) {
    std::memcpy(t.output.data, t.input.data, static_cast<size_t>(t.nbytes()));
  }
  return reduce_buffer(t.output.data, count, r);
}

Status CpuTransport::allreduce_fused(Batch& b) {
  const int64_t bytes = b.plan.bytes;
  if (static_cast<int64_t>(fusion_buffer_.size()) < bytes) {
    fusion_buffer_.resize(static_cast<size_t>(bytes));
  }
  unsigned char* buf = fusion_buffer_.data();
  const int64_t t0 = b.phase ? now_micros() : 0;
  for (size_t k = 0; k < b.tensors.size(); ++k) {
    const BatchTensor& t = b.tensors[k];
    const size_t n = static_cast<size_t>(t.response->nbytes_for_rank(0));
    // Empty tensors only: the buffer may be empty, and memcpy's pointers may not be null.
    if (n == 0) continue;
    if (t.present) {
      std::memcpy(buf + b.plan.offsets[k], t.input.data, n);
    } else {
      std::memset(buf + b.plan.offsets[k], 0, n);
    }
  }
  const Response& r0 = b.first();
  const int64_t count = bytes / static_cast<int64_t>(dtype_size(r0.dtype));
  const int64_t t1 = b.phase ? now_micros() : 0;
  Status s = reduce_buffer(buf, count, r0);
  const int64_t t2 = b.phase ? now_micros() : 0;
  if (!s.ok()) {
    std::string names;
    for (size_t k = 0; k < b.tensors.size() && k < 8; ++k) {
      names += (k ? ", '" : "'") + b.tensors[k].response->name + "'";
    }
    return Status(s.code(), "fused allreduce of " + names + (b.tensors.size() > 8 ? ", ..." : "") +
                                ": " + s.message());
  }
  for (size_t k = 0; k < b.tensors.size(); ++k) {
    const BatchTensor& t = b.tensors[k];
    if (!t.present || t.nbytes() == 0) continue;
    std::memcpy(t.output.data, buf + b.plan.offsets[k], static_cast<size_t>(t.nbytes()));
  }
  if (b.phase) {
    const int64_t t3 = now_micros();
    const std::string args = "\"fused_tensors\":" + std::to_string(b.tensors.size()) +
                             ",\"fused_bytes\":" + std::to_string(bytes);
    const std::string reduce = prefix_ + "ALLREDUCE";
    for (const BatchTensor& t : b.tensors) {
      b.phase(t.response->name, "MEMCPY_IN_FUSION_BUFFER", t0, t1, "");
      b.phase(t.response->name, reduce.c_str(), t1, t2, args);
      b.phase(t.response->name, "MEMCPY_OUT_FUSION_BUFFER", t2, t3, "");
    }
  }
  return Status::OK();
}

Status CpuTransport::allgather(const Response& r, const BatchTensor& t, TensorResult* out) {
  const AllgatherPlan plan = plan_allgather(r);
  Tensor result = Tensor::empty(r.dtype, plan.shape);  // every byte is written below
  HVD_RETURN_IF_ERROR(plane_->allgatherv(t.input.data, result.data(), plan.bytes));
  out->has_tensor = true;
  out->tensor = std::move(result);
  return Status::OK();
}

Status CpuTransport::alltoall(const Response& r, const BatchTensor& t, TensorResult* out) {
  AlltoallPlan plan = plan_alltoall(r, layout_.size, layout_.rank);
  Shape out_shape = r.shape;
  out_shape[0] = plan.rows;
  Tensor result = Tensor::empty(r.dtype, out_shape);  // every byte is written below
  HVD_RETURN_IF_ERROR(
      plane_->alltoallv(t.input.data, plan.send_bytes, result.data(), plan.recv_bytes));
  out->has_tensor = true;
  out->tensor = std::move(result);
  out->splits = std::move(plan.recv_rows);
  return Status::OK();
}

Status CpuTransport::reducescatter(const Response& r, const BatchTensor& t, TensorResult* out) {
  const int size = layout_.size, rank = layout_.rank;
  const ReducescatterSplit split = split_reducescatter(r, size);
  const std::vector<int64_t>& counts = split.counts;
  Shape out_shape = r.shape;
  out_shape[0] = split.rows[static_cast<size_t>(rank)];
  Tensor result = Tensor::empty(r.dtype, out_shape);  // every byte is written below
  const int64_t total = num_elements(r.shape);
  const int64_t bytes = total * static_cast<int64_t>(dtype_size(r.dtype));
  // Only a prescale factor needs a scaled copy of the input; otherwise MPI reads it in place.
  const void* in = t.input.data;
  if (r.prescale != 1.0) {
    unsigned char* scaled = scratch(bytes);
    if (bytes > 0) std::memcpy(scaled, t.input.data, static_cast<size_t>(bytes));
    scale_buffer(scaled, total, r.dtype, r.prescale);
    in = scaled;
  }
  HVD_RETURN_IF_ERROR(plane_->reducescatter(in, result.data(), counts, r.dtype, r.reduce_op));
  const int64_t mine = counts[static_cast<size_t>(rank)];
  if (is_floating_point(r.dtype) || r.postscale != 1.0) {  // integers: as in reduce_buffer
    double post = r.postscale;
    if (r.reduce_op == ReduceOp::kAverage) post /= static_cast<double>(size);
    scale_buffer(result.data(), mine, r.dtype, post);
  } else if (r.reduce_op == ReduceOp::kAverage) {
    divide_integers(result.data(), mine, r.dtype, size);
  }
  out->has_tensor = true;
  out->tensor = std::move(result);
  return Status::OK();
}

}  // namespace hvd
