// Copyright horovod_cpp authors.
#include "backends/shm/shm_transport.h"

#include <chrono>
#include <cstring>

#include "backends/cpu/cpu_ops.h"
#include "backends/row_layout.h"
#include "backends/shm/shm_allreduce.h"
#include "backends/shm/shm_setup.h"
#include "common/logging.h"

namespace hvd {
namespace {

int64_t now_micros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class ShmTransport : public Transport {
 public:
  ShmTransport(std::unique_ptr<ShmAllreduce> shm, int rank, int size, int64_t min_bytes)
      : shm_(std::move(shm)), rank_(rank), size_(size), min_bytes_(min_bytes) {}
  const char* name() const override { return "shm"; }
  bool accepts(const Batch& b) const override {
    if (!b.device.is_cpu() || b.bytes < min_bytes_) return false;
    // A reducescatter is never fused; a joined rank's missing one is left to MPI.
    return b.op == OpType::kAllreduce ||
           (b.op == OpType::kReducescatter && b.tensors.size() == 1 && b.tensors[0].present);
  }
  void run(Batch& b) override {
    const int64_t t0 = b.phase ? now_micros() : 0;
    BatchOutcome out;  // an allreduce allocates no results: out.results stays empty
    const bool rs = b.op == OpType::kReducescatter;
    if (rs) {
      out.results.resize(1);
      out.status = reducescatter(b, &out.results[0]);
    } else {
      out.status = allreduce(b);
    }
    if (b.phase) {
      const int64_t t1 = now_micros();
      const char* phase = rs ? "SHM_REDUCESCATTER" : "SHM_ALLREDUCE";
      for (const BatchTensor& t : b.tensors) b.phase(t.response->name, phase, t0, t1, "");
    }
    b.done(std::move(out));
  }

 private:
  Status allreduce(Batch& b);
  Status reducescatter(Batch& b, TensorResult* out);
  /// The factor and integer divisor that finish a reduction (Average, postscale).
  void finish_factors(const Response& r, double* scale, int64_t* divisor) const;
  unsigned char* zeros(int64_t bytes) {
    if (static_cast<int64_t>(zeros_.size()) < bytes) zeros_.resize(static_cast<size_t>(bytes));
    std::memset(zeros_.data(), 0, static_cast<size_t>(bytes));
    return zeros_.data();
  }

  std::unique_ptr<ShmAllreduce> shm_;
  const int rank_;
  const int size_;
  const int64_t min_bytes_;
  std::vector<unsigned char> zeros_;  // the contribution of tensors a joined rank lacks
};

Status ShmTransport::allreduce(Batch& b) {
  const Response& r0 = b.first();
  int64_t absent_bytes = 0;
  for (const BatchTensor& t : b.tensors) {
    if (!t.present) absent_bytes += t.response->nbytes_for_rank(0);
  }
  unsigned char* zero = absent_bytes ? zeros(absent_bytes) : nullptr;
  std::vector<Segment> segs;
  segs.reserve(b.tensors.size());
  for (const BatchTensor& t : b.tensors) {
    const int64_t count = num_elements(t.response->shape);
    if (!t.present) {  // joined: zeros in, result dropped
      segs.push_back({zero, count});
      zero += count * static_cast<int64_t>(dtype_size(r0.dtype));
      continue;
    }
    if (t.output.data != t.input.data) {
      std::memcpy(t.output.data, t.input.data, static_cast<size_t>(t.input.nbytes()));
    }
    scale_buffer(t.output.data, count, r0.dtype, r0.prescale);
    segs.push_back({t.output.data, count});
  }
  double scale = 1.0;
  int64_t divisor = 1;
  finish_factors(r0, &scale, &divisor);
  Status s = shm_->allreduce(segs, r0.dtype, r0.reduce_op, scale, divisor);
  if (!s.ok()) {
    return Status(s.code(), "allreduce '" + r0.name + "'" + (b.tensors.size() > 1 ? " (fused)" : "") +
                                ": " + s.message());
  }
  return Status::OK();
}

void ShmTransport::finish_factors(const Response& r, double* scale, int64_t* divisor) const {
  *scale = r.postscale;
  *divisor = 1;
  if (r.reduce_op == ReduceOp::kAverage) {
    *scale /= static_cast<double>(size_);
    *divisor = size_;
  }
  if (!is_floating_point(r.dtype)) {  // integers: scaled (in double) only with a postscale
    if (r.postscale == 1.0) {
      *scale = 1.0;
    } else {
      *divisor = 1;
    }
  }
}

Status ShmTransport::reducescatter(Batch& b, TensorResult* out) {
  const Response& r = b.first();
  const ReducescatterSplit split = split_reducescatter(r, size_);
  const std::vector<int64_t>& counts = split.counts;
  Shape out_shape = r.shape;
  out_shape[0] = split.rows[static_cast<size_t>(rank_)];
  Tensor result = Tensor::empty(r.dtype, out_shape);  // every element is written
  double scale = 1.0;
  int64_t divisor = 1;
  finish_factors(r, &scale, &divisor);
  Status s = shm_->reducescatter(b.tensors[0].input.data, result.data(), counts, r.dtype,
                                 r.reduce_op, r.prescale, scale, divisor);
  if (!s.ok()) return Status(s.code(), "reducescatter '" + r.name + "': " + s.message());
  out->has_tensor = true;
  out->tensor = std::move(result);
  return Status::OK();
}

}  // namespace

std::unique_ptr<Transport> make_shm_transport(const TransportContext& ctx) {
  const Config& config = *ctx.config;
  if (!config.shm_enabled) return nullptr;
  std::string why_not;
  std::unique_ptr<ShmAllreduce> shm =
      make_shm_allreduce(ctx.data_comm, ctx.set_id, config.shm_chunk_bytes, &why_not);
  if (!shm) {
    if (ctx.layout.size > 1) {
      HVD_LOG(kInfo) << "process set " << ctx.set_id << ": shared-memory allreduce unavailable ("
                     << why_not << "); CPU allreduces use MPI";
    }
    return nullptr;
  }
  return std::make_unique<ShmTransport>(std::move(shm), ctx.layout.rank, ctx.layout.size,
                                        config.shm_min_bytes);
}

}  // namespace hvd
