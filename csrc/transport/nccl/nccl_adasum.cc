// Copyright horovod_cpp authors. Adasum on CUDA tensors (see nccl_internal.h).
//
// Adasum is not an elementwise fold (each tensor's dot products and norms weigh the pair), so
// NCCL cannot run it. As Horovod does on GPUs, the combination runs on the host: the batch's
// bytes are copied to pinned host memory, a CpuTransport over the set's own data plane (MPI or
// Gloo) runs them as the batch of CPU tensors it would be, and the result is copied back on
// the transport's stream, after which the finalizer completes the batch as any other. The host
// part is the CPU tensors' code itself (the gathered or vector-halving distance-doubling
// schedule, the per-tensor segments of a fused batch, the scale factors, zeros for a joined
// rank: docs/training.md, "Adasum"), so a CUDA tensor ends with the bytes that a CPU tensor of
// the same values gets. The background thread blocks while the host combines (the data plane
// needs the bytes on the host), as it does for the hierarchical allreduce.
#include <memory>
#include <vector>

#include "common/fatal.h"
#include "transport/cpu/cpu_transport.h"
#include "transport/nccl/nccl_internal.h"

namespace hvd {
namespace nccl {

Status NcclTransport::adasum_allreduce(const Batch& b, const std::string& c) {
  const std::vector<BatchTensor>& ts = b.tensors;
  const int64_t bytes = b.fused() ? b.bytes : ts[0].bytes;
  // Nothing to combine: a CPU batch of no bytes makes no exchange either.
  if (bytes == 0) return Status::OK();
  unsigned char* host = nullptr;
  unsigned char* dev = nullptr;  // a fused batch's device fusion buffer
  std::vector<cuda::CopyItem> in, out;
  // To the host: one tensor straight from its input; a fused batch packed into the device
  // fusion buffer by one batched copy, then one transfer. A joined rank's absent tensors are
  // not copied: the host batch marks them absent, and CpuTransport puts zeros in their place.
  const Status staged = [&]() -> Status {
    if (!host_adasum_) {
      std::unique_ptr<DataPlane> plane;
      const Status s = o_.bootstrap->make_data_plane(&plane);
      if (!s.ok()) return Status(s.code(), ctx(c) + ": the data plane for Adasum: " + s.message());
      host_adasum_ = std::make_unique<CpuTransport>(std::move(plane),
                                                    SetLayout{o_.rank, o_.size, o_.global_ranks});
    }
    HVD_RETURN_IF_ERROR(ensure_host(static_cast<size_t>(bytes), c));
    host = static_cast<unsigned char*>(host_buf_);
    if (b.fused()) {
      HVD_RETURN_IF_ERROR(ensure(&fusion_, &fusion_cap_, static_cast<size_t>(bytes), c));
      dev = static_cast<unsigned char*>(fusion_);
      for (size_t k = 0; k < ts.size(); ++k) {
        if (!ts[k].present) continue;
        in.push_back({ts[k].input.data, dev + b.offsets[k], ts[k].count});
        out.push_back({dev + b.offsets[k], ts[k].output.data, ts[k].count});
      }
      HVD_KERNEL_CHECK(cuda::batched_copy_scale(in.data(), in.size(), b.dtype, 1.0, stream_),
                       ctx(c));
      HVD_CUDA_CHECK(
          cudaMemcpyAsync(host, dev, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, stream_),
          ctx(c));
    } else if (ts[0].present) {
      HVD_CUDA_CHECK(cudaMemcpyAsync(host, ts[0].input.data, static_cast<size_t>(bytes),
                                     cudaMemcpyDeviceToHost, stream_),
                     ctx(c));
    }
    return wait_for_stream(comm_.get(), c, "copying Adasum's input to the host");
  }();
  if (!staged.ok()) {
    // The other ranks go on into the exchange on the host and would wait there for this one.
    if (o_.size > 1) {
      report_fatal(staged.message() +
                   " (before Adasum's exchange on the host, where the other "
                   "ranks wait for this one)");
    }
    return staged;
  }

  // The same batch over host memory, in place. The factors travel in the reduction spec: the
  // host applies them as it does for CPU tensors, so the copies here do not scale.
  Batch& h = host_batch_;
  h.op = OpType::kAllreduce;
  h.dtype = b.dtype;
  h.device = Device::cpu();
  h.bytes = bytes;
  h.offsets = b.offsets;
  h.reduction = b.reduction;
  h.tensors.resize(ts.size());
  for (size_t k = 0; k < ts.size(); ++k) {
    BatchTensor& t = h.tensors[k];
    t.name = ts[k].name;
    t.count = ts[k].count;
    t.bytes = ts[k].bytes;
    t.present = ts[k].present;
    t.input.data = host + (b.fused() ? b.offsets[k] : 0);
    t.input.dtype = b.dtype;
    t.input.device = Device::cpu();
    t.input.stream = nullptr;
    t.output = t.input;
  }
  h.phase = nullptr;
  Status combined;
  h.done = [&combined](BatchOutcome o) { combined = std::move(o.status); };
  host_adasum_->run(h);  // synchronous: done has been called
  h.done = nullptr;
  if (!combined.ok()) {
    return Status(
        combined.code(),
        combined.message() + " (Adasum of CUDA tensors, combined on the host" + ctx("") + ")");
  }

  // Back to the device, on the stream: the finalizer completes the batch after these copies.
  if (b.fused()) {
    HVD_CUDA_CHECK(
        cudaMemcpyAsync(dev, host, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_),
        ctx(c));
    HVD_KERNEL_CHECK(cuda::batched_copy_scale(out.data(), out.size(), b.dtype, 1.0, stream_),
                     ctx(c));
  } else if (ts[0].present) {
    HVD_CUDA_CHECK(cudaMemcpyAsync(ts[0].output.data, host, static_cast<size_t>(bytes),
                                   cudaMemcpyHostToDevice, stream_),
                   ctx(c));
  }
  return Status::OK();
}

}  // namespace nccl
}  // namespace hvd
