// Copyright horovod_cpp authors. Hierarchical allreduce on CUDA tensors (see nccl_internal.h):
// NCCL within each host, the set's Bootstrap data plane (MPI) across hosts
// (HOROVOD_HIERARCHICAL_ALLREDUCE); and the staging through pinned host memory that it shares
// with Adasum (nccl_adasum.cc).
#include <algorithm>

#include "transport/nccl/nccl_internal.h"
#include "common/logging.h"

namespace hvd {
namespace nccl {

// Splits the set into hosts (shared-memory domains): usable when there are several hosts
// with the same number of members each; otherwise the flat allreduce is as good, and is used.
Status NcclTransport::setup_hierarchical(const std::string& c) {
  if (hier_checked_) return Status::OK();
  hier_checked_ = true;
  Bootstrap& set = *o_.bootstrap;
  auto failed = [&](const Status& s) { return Status(s.code(), ctx(c) + ": " + s.message()); };
  Status s = set.split_host(&local_group_);
  if (!s.ok()) return failed(s);
  local_rank_ = local_group_->rank();
  local_size_ = local_group_->size();
  s = set.split(local_rank_, o_.rank, &cross_group_);
  if (!s.ok()) return failed(s);
  cross_size_ = cross_group_->size();
  std::vector<int> sizes(static_cast<size_t>(o_.size));
  s = set.allgather(&local_size_, sizeof(int), sizes.data());
  if (!s.ok()) return failed(s);
  const bool homogeneous =
      *std::min_element(sizes.begin(), sizes.end()) == *std::max_element(sizes.begin(), sizes.end());
  if (!homogeneous || cross_size_ == 1 || local_size_ == 1) {
    HVD_LOG(kInfo) << "process set " << o_.set_id << ": HOROVOD_HIERARCHICAL_ALLREDUCE set but "
                   << (homogeneous ? (cross_size_ == 1 ? "all ranks share one host"
                                                       : "each host has one rank")
                                   : "hosts have different numbers of ranks")
                   << "; using the flat NCCL allreduce";
    hier_usable_ = false;
    return Status::OK();
  }
  HVD_RETURN_IF_ERROR(make_comm(*local_group_, c, &local_comm_));
  s = cross_group_->make_data_plane(&cross_plane_);
  if (!s.ok()) return failed(s);
  hier_usable_ = true;
  return Status::OK();
}

// NCCL reduce-scatter within the host, MPI allreduce of this rank's shard across hosts (through
// pinned host memory), NCCL allgather within the host. `count` is a multiple of the local size.
// Blocks this thread while the shard crosses hosts (MPI needs the data on the host).
Status NcclTransport::hierarchical_allreduce(void* buf, int64_t count, const Batch& b,
                                          const std::string& c) {
  ncclDataType_t t;
  HVD_RETURN_IF_ERROR(nccl_type(b.dtype, &t, ctx(c)));
  const ReductionSpec& spec = b.reduction;
  const ncclRedOp_t op = nccl_op(b.dtype, spec.op, /*avg_ok=*/false);
  const size_t esize = dtype_size(b.dtype);
  const int64_t shard = count / local_size_;
  unsigned char* mine = static_cast<unsigned char*>(buf) + shard * local_rank_ * static_cast<int64_t>(esize);
  const size_t shard_bytes = static_cast<size_t>(shard) * esize;
  Comm& local = *local_comm_;
  HVD_RETURN_IF_ERROR(nccl_group(local, c + " (hierarchical: reduce-scatter within the host)", [&]() -> Status {
    HVD_NCCL_CHECK(ncclReduceScatter(buf, mine, static_cast<size_t>(shard), t, op, local.comm, stream_),
                   local.comm, ctx(c));
    return Status::OK();
  }));
  HVD_RETURN_IF_ERROR(ensure_host(shard_bytes, c));
  HVD_CUDA_CHECK(cudaMemcpyAsync(host_buf_, mine, shard_bytes, cudaMemcpyDeviceToHost, stream_), ctx(c));
  HVD_RETURN_IF_ERROR(wait_for_stream(&local, c, "the reduce-scatter within the host"));
  // Across hosts: the data plane reduces half types itself (MPI: its own operators); Average
  // travels as Sum (the caller's post-scale divides).
  const ReduceOp cross_op = spec.op == ReduceOp::kAverage ? ReduceOp::kSum : spec.op;
  Status s = cross_plane_->allreduce(host_buf_, shard, b.dtype, cross_op);
  if (!s.ok()) return Status(s.code(), ctx(c) + " (hierarchical: allreduce across hosts): " + s.message());
  HVD_CUDA_CHECK(cudaMemcpyAsync(mine, host_buf_, shard_bytes, cudaMemcpyHostToDevice, stream_), ctx(c));
  HVD_RETURN_IF_ERROR(nccl_group(local, c + " (hierarchical: allgather within the host)", [&]() -> Status {
    HVD_NCCL_CHECK(ncclAllGather(mine, buf, static_cast<size_t>(shard), t, local.comm, stream_),
                   local.comm, ctx(c));
    return Status::OK();
  }));
  if (spec.divisor > 1) {  // an integer Average (floats: the caller's post-scale divides)
    HVD_KERNEL_CHECK(cuda::divide_integers(buf, count, b.dtype, spec.divisor, stream_), ctx(c));
  }
  return Status::OK();
}

Status NcclTransport::ensure_host(size_t bytes, const std::string& c) {
  if (host_cap_ >= bytes) return Status::OK();
  if (host_buf_) {
    HVD_CUDA_CHECK(cudaStreamSynchronize(stream_), ctx(c));
    HVD_CUDA_CHECK(cudaFreeHost(host_buf_), ctx(c));
    host_buf_ = nullptr;
    host_cap_ = 0;
  }
  HVD_CUDA_CHECK(cudaMallocHost(&host_buf_, bytes), ctx(c) + ", " + std::to_string(bytes) + " pinned bytes");
  host_cap_ = bytes;
  return Status::OK();
}

// Polls an event rather than synchronizing the stream: a synchronize cannot be bounded, and
// the work before the event may wait on a peer that has failed.
Status NcclTransport::wait_for_stream(Comm* watch, const std::string& c, const std::string& step) {
  HVD_CUDA_CHECK(cudaEventRecord(host_ev_, stream_), ctx(c));
  const std::string what = c + " (" + step + ")";
  const auto start = Clock::now();
  while (true) {
    const cudaError_t q = cudaEventQuery(host_ev_);
    if (q == cudaSuccess) return Status::OK();
    if (q != cudaErrorNotReady) HVD_CUDA_CHECK(q, ctx(what));
    if (watch) {
      std::lock_guard<std::mutex> lk(watch->mu);
      Status s = settle(*watch, what);
      if (!s.ok()) return s;
    }
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (o_.config.nccl_timeout_seconds > 0 && waited > o_.config.nccl_timeout_seconds) {
      const std::string why = ctx(c) + ": " + step + " did not finish within " +
                              std::to_string(static_cast<long long>(o_.config.nccl_timeout_seconds)) +
                              " s (HOROVOD_CPP_NCCL_TIMEOUT_SECONDS)";
      if (watch) {
        std::lock_guard<std::mutex> lk(watch->mu);
        abort_locked(*watch, why);
      }
      return Status::Backend(why);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}


}  // namespace nccl
}  // namespace hvd
