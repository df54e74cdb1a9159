// Copyright horovod_cpp authors. The NCCL transport's collectives (see nccl_internal.h), each
// enqueued on the transport's stream; hierarchical allreduce is in nccl_hierarchical.cc.
#include <algorithm>

#include "transport/nccl/nccl_internal.h"
#include "transport/row_layout.h"

namespace hvd {
namespace nccl {

Status nccl_type(DataType d, ncclDataType_t* out, const std::string& ctx) {
  switch (d) {
    case DataType::kUInt8: *out = ncclUint8; return Status::OK();
    case DataType::kBool: *out = ncclUint8; return Status::OK();
    case DataType::kInt8: *out = ncclInt8; return Status::OK();
    case DataType::kInt32: *out = ncclInt32; return Status::OK();
    case DataType::kInt64: *out = ncclInt64; return Status::OK();
    case DataType::kFloat16: *out = ncclFloat16; return Status::OK();
    case DataType::kBFloat16: *out = ncclBfloat16; return Status::OK();
    case DataType::kFloat32: *out = ncclFloat32; return Status::OK();
    case DataType::kFloat64: *out = ncclFloat64; return Status::OK();
    case DataType::kInt16:
    case DataType::kUInt16: break;
  }
  return Status::InvalidArgument(ctx + ": NCCL cannot reduce " + dtype_name(d) +
                                 " tensors; use int32 (or a CPU tensor)");
}

// The NCCL operator for `op` on `d`. Average uses ncclAvg for floating types when `avg_ok`
// (a flat allreduce over every rank); otherwise it reduces as Sum and the caller divides.
// Bool: Sum/Max/Average are logical or (max of 0/1), Min/Product logical and (min), as on the CPU.
ncclRedOp_t nccl_op(DataType d, ReduceOp op, bool avg_ok) {
  if (d == DataType::kBool) {
    return (op == ReduceOp::kMin || op == ReduceOp::kProduct) ? ncclMin : ncclMax;
  }
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAverage: return (avg_ok && is_float(d)) ? ncclAvg : ncclSum;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kProduct: return ncclProd;
    case ReduceOp::kAdasum: break;  // never NCCL's: combined on the host (nccl_adasum.cc)
  }
  return ncclSum;
}


// ---- allreduce -----------------------------------------------------------------------------

// Reduces `count` elements of `src` into `buf` (device memory; src == buf: in place) with b's
// op and integer divisor; the prescale is applied by the copy in, the postscale by the copy
// out (see allreduce()). The hierarchical path works in place only: allreduce() passes a
// separate `src` only when it is not taken.
Status NcclTransport::reduce_in_place(void* buf, int64_t count, const Batch& b, const std::string& c,
                                      const void* src) {
  if (src == nullptr) src = buf;
  if (o_.config.hierarchical_allreduce && o_.size > 1) {
    HVD_RETURN_IF_ERROR(setup_hierarchical(c));
    if (hier_usable_) {
      if (src != buf) {
        HVD_CUDA_CHECK(cudaMemcpyAsync(buf, src, static_cast<size_t>(count) * dtype_size(b.dtype),
                                       cudaMemcpyDeviceToDevice, stream_), ctx(c));
      }
      return hierarchical_allreduce(buf, count, b, c);
    }
  }
  ncclDataType_t t;
  HVD_RETURN_IF_ERROR(nccl_type(b.dtype, &t, ctx(c)));
  const ncclRedOp_t op = nccl_op(b.dtype, b.reduction.op, /*avg_ok=*/true);
  Comm& comm = *comm_;
  HVD_RETURN_IF_ERROR(nccl_group(comm, c, [&]() -> Status {
    HVD_NCCL_CHECK(ncclAllReduce(src, buf, static_cast<size_t>(count), t, op, comm.comm, stream_),
                   comm.comm, ctx(c));
    return Status::OK();
  }));
  if (b.reduction.divisor > 1) {  // an integer Average (floats: ncclAvg)
    HVD_KERNEL_CHECK(cuda::divide_integers(buf, count, b.dtype, b.reduction.divisor, stream_), ctx(c));
  }
  return Status::OK();
}

Status NcclTransport::allreduce(const Batch& batch, const std::string& c) {
  if (batch.reduction.op == ReduceOp::kAdasum) return adasum_allreduce(batch, c);
  const std::vector<BatchTensor>& ts = batch.tensors;
  const ReductionSpec& spec = batch.reduction;
  const size_t esize = dtype_size(batch.dtype);
  const bool fp = is_float(batch.dtype);
  bool hier = false;
  if (o_.config.hierarchical_allreduce && o_.size > 1) {
    HVD_RETURN_IF_ERROR(setup_hierarchical(c));
    hier = hier_usable_;
  }
  // The flat reduction averages floats itself (ncclAvg): only the postscale is left. The
  // hierarchical one sums: the spec's scale divides by the size.
  const double post = hier ? spec.scale : spec.postscale;

  if (!batch.fused() && ts[0].present && !hier) {
    // One tensor: reduce in the output itself (out of place: copy in, with the prescale).
    const BatchTensor& e = ts[0];
    const int64_t count = e.count;
    if (count == 0) return Status::OK();
    // Out of place without a prescale: NCCL reads the input and writes the output itself (one
    // pass over the memory instead of a copy and then an in-place reduction).
    const void* src = e.output.data;
    if (e.output.data != e.input.data || (fp && spec.prescale != 1.0)) {
      if (fp && spec.prescale != 1.0) {
        cuda::CopyItem item{e.input.data, e.output.data, count};
        HVD_KERNEL_CHECK(cuda::batched_copy_scale(&item, 1, batch.dtype, spec.prescale, stream_), ctx(c));
      } else {
        src = e.input.data;
      }
    }
    HVD_RETURN_IF_ERROR(reduce_in_place(e.output.data, count, batch, c, src));
    if (fp && post != 1.0) {
      HVD_KERNEL_CHECK(cuda::scale_in_place(e.output.data, count, batch.dtype, post, stream_), ctx(c));
    }
    return Status::OK();
  }

  // Through the fusion buffer: batched copy in (prescaled; zeros for tensors this joined rank
  // did not submit), one reduction, batched copy out (postscaled). Hierarchical reductions
  // pad the buffer to a multiple of the local size for the reduce-scatter.
  int64_t count = batch.fused() ? batch.bytes / static_cast<int64_t>(esize) : ts[0].count;
  const int64_t padded = hier ? (count + local_size_ - 1) / local_size_ * local_size_ : count;
  if (padded == 0) return Status::OK();
  HVD_RETURN_IF_ERROR(ensure(&fusion_, &fusion_cap_, static_cast<size_t>(padded) * esize, c));
  unsigned char* buf = static_cast<unsigned char*>(fusion_);
  std::vector<cuda::CopyItem> in, out;
  for (size_t k = 0; k < ts.size(); ++k) {
    const int64_t off = batch.fused() ? batch.offsets[k] : 0;
    const int64_t n = ts[k].count;
    if (ts[k].present) {
      in.push_back({ts[k].input.data, buf + off, n});
      out.push_back({buf + off, ts[k].output.data, n});
    } else if (n > 0) {
      HVD_CUDA_CHECK(cudaMemsetAsync(buf + off, 0, static_cast<size_t>(n) * esize, stream_), ctx(c));
    }
  }
  if (padded > count) {
    HVD_CUDA_CHECK(cudaMemsetAsync(buf + count * static_cast<int64_t>(esize), 0,
                                   static_cast<size_t>(padded - count) * esize, stream_), ctx(c));
  }
  HVD_KERNEL_CHECK(cuda::batched_copy_scale(in.data(), in.size(), batch.dtype, fp ? spec.prescale : 1.0, stream_), ctx(c));
  HVD_RETURN_IF_ERROR(reduce_in_place(buf, padded, batch, c));
  HVD_KERNEL_CHECK(cuda::batched_copy_scale(out.data(), out.size(), batch.dtype, fp ? post : 1.0, stream_), ctx(c));
  return Status::OK();
}


// ---- other collectives ---------------------------------------------------------------------

Status NcclTransport::allgather(const Batch& b, TensorResult* result, const std::string& c) {
  const BatchTensor& e = b.tensors[0];
  const int64_t row_bytes = num_elements(Shape(b.shape.begin() + 1, b.shape.end())) *
                            static_cast<int64_t>(dtype_size(b.dtype));
  Shape out_shape = b.shape;
  int64_t rows = 0;
  bool equal = true;
  for (int64_t d : b.first_dims) {
    rows += d;
    equal = equal && d == b.first_dims[0];
  }
  out_shape[0] = rows;
  Tensor out;
  HVD_RETURN_IF_ERROR(alloc_output(b.dtype, out_shape, e.input.stream, &out, c));
  unsigned char* dst = static_cast<unsigned char*>(out.data());
  if (rows > 0 && row_bytes > 0) {
    Comm& comm = *comm_;
    HVD_RETURN_IF_ERROR(nccl_group(comm, c, [&]() -> Status {
      if (equal) {
        HVD_NCCL_CHECK(ncclAllGather(e.input.data, dst, static_cast<size_t>(b.first_dims[0] * row_bytes),
                                     ncclUint8, comm.comm, stream_), comm.comm, ctx(c));
        return Status::OK();
      }
      // Variable first dimension: each rank's block is a broadcast from that rank, in one group.
      int64_t off = 0;
      for (int k = 0; k < o_.size; ++k) {
        const int64_t bytes = b.first_dims[static_cast<size_t>(k)] * row_bytes;
        if (bytes > 0) {
          HVD_NCCL_CHECK(ncclBroadcast(e.input.data, dst + off, static_cast<size_t>(bytes), ncclUint8,
                                       k, comm.comm, stream_), comm.comm, ctx(c));
        }
        off += bytes;
      }
      return Status::OK();
    }));
  }
  result->has_tensor = true;
  result->tensor = std::move(out);
  return Status::OK();
}

Status NcclTransport::broadcast(const Batch& b, const std::string& c) {
  const BatchTensor& e = b.tensors[0];
  const int root = b.root;
  if (root < 0) {
    return Status::InvalidArgument(ctx(c) + ": root rank " + std::to_string(b.global_root) + " is not in the set");
  }
  const size_t bytes = static_cast<size_t>(e.bytes);
  if (bytes == 0) return Status::OK();
  Comm& comm = *comm_;
  return nccl_group(comm, c, [&]() -> Status {
    HVD_NCCL_CHECK(ncclBroadcast(e.output.data, e.output.data, bytes, ncclUint8, root, comm.comm, stream_),
                   comm.comm, ctx(c));
    return Status::OK();
  });
}

Status NcclTransport::alltoall(const Batch& b, TensorResult* result, const std::string& c) {
  const BatchTensor& e = b.tensors[0];
  const size_t n = static_cast<size_t>(o_.size);
  const size_t me = static_cast<size_t>(o_.rank);
  AlltoallPlan plan = plan_alltoall(b, o_.size, o_.rank);
  const std::vector<int64_t>& send = plan.send_bytes;
  const std::vector<int64_t>& recv = plan.recv_bytes;
  Shape out_shape = b.shape;
  out_shape[0] = plan.rows;
  Tensor out;
  HVD_RETURN_IF_ERROR(alloc_output(b.dtype, out_shape, e.input.stream, &out, c));
  const unsigned char* src = static_cast<const unsigned char*>(e.input.data);
  unsigned char* dst = static_cast<unsigned char*>(out.data());
  std::vector<int64_t> soff(n, 0), roff(n, 0);
  for (size_t k = 1; k < n; ++k) {
    soff[k] = soff[k - 1] + send[k - 1];
    roff[k] = roff[k - 1] + recv[k - 1];
  }
  if (send[me] > 0) {  // this rank's own block: a device copy
    HVD_CUDA_CHECK(cudaMemcpyAsync(dst + roff[me], src + soff[me], static_cast<size_t>(send[me]),
                                   cudaMemcpyDeviceToDevice, stream_), ctx(c));
  }
  Comm& comm = *comm_;
  HVD_RETURN_IF_ERROR(nccl_group(comm, c, [&]() -> Status {
    // Both sides skip empty blocks alike: every rank knows the whole split matrix.
    for (size_t k = 0; k < n; ++k) {
      if (k == me) continue;
      if (send[k] > 0) {
        HVD_NCCL_CHECK(ncclSend(src + soff[k], static_cast<size_t>(send[k]), ncclUint8,
                                static_cast<int>(k), comm.comm, stream_), comm.comm, ctx(c));
      }
      if (recv[k] > 0) {
        HVD_NCCL_CHECK(ncclRecv(dst + roff[k], static_cast<size_t>(recv[k]), ncclUint8,
                                static_cast<int>(k), comm.comm, stream_), comm.comm, ctx(c));
      }
    }
    return Status::OK();
  }));
  result->has_tensor = true;
  result->tensor = std::move(out);
  result->splits = std::move(plan.recv_rows);
  return Status::OK();
}

Status NcclTransport::reducescatter(const Batch& b, TensorResult* result, const std::string& c) {
  const BatchTensor& e = b.tensors[0];
  const ReductionSpec& spec = b.reduction;
  const int size = o_.size;
  const ReducescatterSplit split = split_reducescatter(b, size);
  const std::vector<int64_t>& counts = split.counts;
  const bool equal = split.equal();
  Shape out_shape = b.shape;
  out_shape[0] = split.rows[static_cast<size_t>(o_.rank)];
  Tensor out;
  HVD_RETURN_IF_ERROR(alloc_output(b.dtype, out_shape, e.input.stream, &out, c));
  ncclDataType_t t;
  HVD_RETURN_IF_ERROR(nccl_type(b.dtype, &t, ctx(c)));
  const bool fp = is_float(b.dtype);
  const ncclRedOp_t op = nccl_op(b.dtype, spec.op, /*avg_ok=*/true);
  const size_t esize = dtype_size(b.dtype);
  const int64_t total = e.count;
  const void* in = e.input.data;
  if (fp && spec.prescale != 1.0 && total > 0) {  // the input is not modified: prescale a copy
    HVD_RETURN_IF_ERROR(ensure(&scratch_, &scratch_cap_, static_cast<size_t>(total) * esize, c));
    cuda::CopyItem item{e.input.data, scratch_, total};
    HVD_KERNEL_CHECK(cuda::batched_copy_scale(&item, 1, b.dtype, spec.prescale, stream_), ctx(c));
    in = scratch_;
  }
  if (total > 0) {
    Comm& comm = *comm_;
    HVD_RETURN_IF_ERROR(nccl_group(comm, c, [&]() -> Status {
      if (equal) {
        HVD_NCCL_CHECK(ncclReduceScatter(in, out.data(), static_cast<size_t>(counts[0]), t, op,
                                         comm.comm, stream_), comm.comm, ctx(c));
        return Status::OK();
      }
      // Uneven blocks: one reduce per block, rooted at the rank that receives it.
      int64_t off = 0;
      for (int k = 0; k < size; ++k) {
        const int64_t cnt = counts[static_cast<size_t>(k)];
        if (cnt > 0) {
          HVD_NCCL_CHECK(ncclReduce(static_cast<const unsigned char*>(in) + off * static_cast<int64_t>(esize),
                                    k == o_.rank ? out.data() : nullptr, static_cast<size_t>(cnt), t, op, k,
                                    comm.comm, stream_), comm.comm, ctx(c));
        }
        off += cnt;
      }
      return Status::OK();
    }));
  }
  const int64_t mine = counts[static_cast<size_t>(o_.rank)];
  if (mine > 0) {
    // Floats were averaged by ncclAvg: only the postscale is left.
    if (fp && spec.postscale != 1.0) {
      HVD_KERNEL_CHECK(cuda::scale_in_place(out.data(), mine, b.dtype, spec.postscale, stream_), ctx(c));
    } else if (spec.divisor > 1) {
      HVD_KERNEL_CHECK(cuda::divide_integers(out.data(), mine, b.dtype, spec.divisor, stream_), ctx(c));
    }
  }
  result->has_tensor = true;
  result->tensor = std::move(out);
  return Status::OK();
}


}  // namespace nccl
}  // namespace hvd
