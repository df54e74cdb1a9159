// Copyright horovod_cpp authors.
#include "transport/cpu/cpu_transport.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>

#include "common/clock.h"
#include "common/fatal.h"
#include "kernels/host/cpu_ops.h"
#include "transport/row_layout.h"

namespace hvd {
namespace {

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
  // Only the collectives that allocate a result need one slot per tensor (never fused).
  if (b.op == OpType::kAllgather || b.op == OpType::kAlltoall || b.op == OpType::kReducescatter) {
    out.results.resize(b.tensors.size());
  }
  const int64_t t0 = b.phase ? steady_us() : 0;
  out.status = run_batch(b, &out.results);
  if (b.phase && !b.fused()) {
    const std::string phase = prefix_ + op_type_name(b.op);
    b.phase(b.name(), phase.c_str(), t0, steady_us(), "");
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
  const BatchTensor& t = b.tensors.front();
  Status s;
  switch (b.op) {
    case OpType::kAllreduce: s = allreduce_one(b); break;
    case OpType::kAllgather: s = allgather(b, &(*results)[0]); break;
    case OpType::kBroadcast:
      s = b.root < 0 ? Status::InvalidArgument("root rank " + std::to_string(b.global_root) +
                                               " is not in the process set")
                     : plane_->broadcast(t.output.data, t.bytes, b.root);
      break;
    case OpType::kBarrier: s = plane_->barrier(); break;
    case OpType::kAlltoall: s = alltoall(b, &(*results)[0]); break;
    case OpType::kReducescatter: s = reducescatter(b, &(*results)[0]); break;
    case OpType::kJoin: s = Status::Backend("join is not a data-plane operation"); break;
  }
  if (!s.ok()) s = Status(s.code(), b.describe() + ": " + s.message());
  return s;
}

unsigned char* CpuTransport::scratch(int64_t bytes) {
  if (static_cast<int64_t>(scratch_.size()) < bytes) scratch_.resize(static_cast<size_t>(bytes));
  return scratch_.data();
}

Status CpuTransport::reduce_buffer(void* buf, int64_t count, const Batch& b) {
  const ReductionSpec& spec = b.reduction;
  if (spec.op == ReduceOp::kAdasum) return adasum_buffer(buf, count, b);
  scale_buffer(buf, count, b.dtype, spec.prescale);
  HVD_RETURN_IF_ERROR(plane_->allreduce(buf, count, b.dtype, spec.op));
  finish_reduction(buf, count, b.dtype, spec.scale, spec.divisor);
  return Status::OK();
}

Status CpuTransport::adasum_buffer(void* buf, int64_t count, const Batch& b) {
  const ReductionSpec& spec = b.reduction;
  const int ranks = layout_.size;
  const int64_t bytes = count * static_cast<int64_t>(dtype_size(b.dtype));
  // Adasum is homogeneous (scaling every input by f scales the result by f), so the factors
  // apply as they do to Sum.
  scale_buffer(buf, count, b.dtype, spec.prescale);
  if (ranks > 1 && bytes > 0) {
    adasum_segments_.clear();
    if (b.fused()) {  // each tensor is its own vector
      for (size_t k = 0; k < b.tensors.size(); ++k) {
        adasum_segments_.push_back({b.offsets[k], b.tensors[k].count});
      }
    } else {
      adasum_segments_.push_back({0, count});
    }
    // The byte count is the same on every rank, so every rank takes the same path.
    if (bytes <= kAdasumGatherMaxBytes) {
      HVD_RETURN_IF_ERROR(adasum_gathered(buf, bytes, b.dtype));
    } else {
      HVD_RETURN_IF_ERROR(
          adasum_vhdd_.run(*plane_, layout_.rank, ranks, buf, count, b.dtype, adasum_segments_));
    }
  }
  finish_reduction(buf, count, b.dtype, spec.scale, spec.divisor);
  return Status::OK();
}

Status CpuTransport::adasum_gathered(void* buf, int64_t bytes, DataType dtype) {
  const int ranks = layout_.size;
  adasum_slots_.resize(static_cast<size_t>(bytes) * static_cast<size_t>(ranks));
  adasum_bytes_.assign(static_cast<size_t>(ranks), bytes);
  HVD_RETURN_IF_ERROR(plane_->allgatherv(buf, adasum_slots_.data(), adasum_bytes_));
  adasum_tree(adasum_slots_.data(), ranks, bytes, adasum_segments_.data(),
              static_cast<int64_t>(adasum_segments_.size()), dtype);
  std::memcpy(buf, adasum_slots_.data(), static_cast<size_t>(bytes));
  return Status::OK();
}

Status CpuTransport::allreduce_one(Batch& b) {
  BatchTensor& t = b.tensors.front();
  if (!t.present) {  // joined: zeros in, result dropped
    unsigned char* z = scratch(t.bytes);
    std::memset(z, 0, static_cast<size_t>(t.bytes));
    return reduce_buffer(z, t.count, b);
  }
  // No fusion: reduce straight in the output tensor, no copy (out of place: one copy in).
  if (t.output.data != t.input.data) {
    std::memcpy(t.output.data, t.input.data, static_cast<size_t>(t.bytes));
  }
  return reduce_buffer(t.output.data, t.count, b);
}

Status CpuTransport::allreduce_fused(Batch& b) {
  const int64_t bytes = b.bytes;
  if (static_cast<int64_t>(fusion_buffer_.size()) < bytes) {
    fusion_buffer_.resize(static_cast<size_t>(bytes));
  }
  unsigned char* buf = fusion_buffer_.data();
  const int64_t t0 = b.phase ? steady_us() : 0;
  for (size_t k = 0; k < b.tensors.size(); ++k) {
    const BatchTensor& t = b.tensors[k];
    const size_t n = static_cast<size_t>(t.bytes);
    // Empty tensors only: the buffer may be empty, and memcpy's pointers may not be null.
    if (n == 0) continue;
    if (t.present) {
      std::memcpy(buf + b.offsets[k], t.input.data, n);
    } else {
      std::memset(buf + b.offsets[k], 0, n);
    }
  }
  const int64_t count = bytes / static_cast<int64_t>(dtype_size(b.dtype));
  const int64_t t1 = b.phase ? steady_us() : 0;
  Status s = reduce_buffer(buf, count, b);
  const int64_t t2 = b.phase ? steady_us() : 0;
  if (!s.ok()) return Status(s.code(), b.describe() + ": " + s.message());
  for (size_t k = 0; k < b.tensors.size(); ++k) {
    const BatchTensor& t = b.tensors[k];
    if (!t.present || t.bytes == 0) continue;
    std::memcpy(t.output.data, buf + b.offsets[k], static_cast<size_t>(t.bytes));
  }
  if (b.phase) {
    const int64_t t3 = steady_us();
    const std::string args = "\"fused_tensors\":" + std::to_string(b.tensors.size()) +
                             ",\"fused_bytes\":" + std::to_string(bytes);
    const std::string reduce = prefix_ + "ALLREDUCE";
    for (const BatchTensor& t : b.tensors) {
      b.phase(*t.name, "MEMCPY_IN_FUSION_BUFFER", t0, t1, "");
      b.phase(*t.name, reduce.c_str(), t1, t2, args);
      b.phase(*t.name, "MEMCPY_OUT_FUSION_BUFFER", t2, t3, "");
    }
  }
  return Status::OK();
}

Status CpuTransport::allgather(const Batch& b, TensorResult* out) {
  const AllgatherPlan plan = plan_allgather(b);
  Tensor result = Tensor::empty(b.dtype, plan.shape);  // every byte is written below
  HVD_RETURN_IF_ERROR(plane_->allgatherv(b.tensors[0].input.data, result.data(), plan.bytes));
  out->has_tensor = true;
  out->tensor = std::move(result);
  return Status::OK();
}

Status CpuTransport::alltoall(const Batch& b, TensorResult* out) {
  AlltoallPlan plan = plan_alltoall(b, layout_.size, layout_.rank);
  Shape out_shape = b.shape;
  out_shape[0] = plan.rows;
  Tensor result = Tensor::empty(b.dtype, out_shape);  // every byte is written below
  HVD_RETURN_IF_ERROR(
      plane_->alltoallv(b.tensors[0].input.data, plan.send_bytes, result.data(), plan.recv_bytes));
  out->has_tensor = true;
  out->tensor = std::move(result);
  out->splits = std::move(plan.recv_rows);
  return Status::OK();
}

Status CpuTransport::reducescatter(const Batch& b, TensorResult* out) {
  const BatchTensor& t = b.tensors[0];
  const ReductionSpec& spec = b.reduction;
  const ReducescatterSplit split = split_reducescatter(b, layout_.size);
  const std::vector<int64_t>& counts = split.counts;
  Shape out_shape = b.shape;
  out_shape[0] = split.rows[static_cast<size_t>(layout_.rank)];
  Tensor result = Tensor::empty(b.dtype, out_shape);  // every byte is written below
  // Only a prescale factor needs a scaled copy of the input; otherwise MPI reads it in place.
  const void* in = t.input.data;
  if (spec.prescale != 1.0) {
    unsigned char* scaled = scratch(t.bytes);
    if (t.bytes > 0) std::memcpy(scaled, t.input.data, static_cast<size_t>(t.bytes));
    scale_buffer(scaled, t.count, b.dtype, spec.prescale);
    in = scaled;
  }
  HVD_RETURN_IF_ERROR(plane_->reducescatter(in, result.data(), counts, b.dtype, spec.op));
  finish_reduction(result.data(), counts[static_cast<size_t>(layout_.rank)], b.dtype, spec.scale,
                   spec.divisor);
  out->has_tensor = true;
  out->tensor = std::move(result);
  return Status::OK();
}

}  // namespace hvd
