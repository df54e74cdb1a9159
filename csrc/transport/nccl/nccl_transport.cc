// Copyright horovod_cpp authors. The NCCL transport (see nccl_internal.h): run(), device
// buffers, ordering after the producers' streams, and the finalizer thread that reports each
// batch once the GPU is done with it.
#include "transport/nccl/nccl_transport.h"

#include <algorithm>

#include "transport/nccl/gpu_device.h"
#include "transport/nccl/nccl_internal.h"
#include "common/cuda_allocator.h"
#include "common/logging.h"

namespace hvd {
namespace nccl {
namespace {

// After an abort, how long the finalizer still waits for a batch's event before failing its
// handles regardless (the aborted kernels normally end at once).
constexpr auto kAfterAbortGrace = std::chrono::seconds(10);
// How long the finalizer polls a batch's event without sleeping (see finalizer_loop).
constexpr auto kSpinFor = std::chrono::milliseconds(2);

}  // namespace

Status NcclTransport::check_device(const Device& device, const std::string& what) const {
  return check_cuda_tensor_device(device, o_.config,
                                  o_.global_ranks[static_cast<size_t>(o_.rank)], o_.local_rank,
                                  o_.local_size, what);
}

Status NcclTransport::wait_producers(const std::vector<BatchTensor>& ts, const std::string& c) {
  std::vector<void*> seen;
  for (const BatchTensor& t : ts) {
    if (!t.present) continue;
    void* s = t.input.stream;
    if (std::find(seen.begin(), seen.end(), s) != seen.end()) continue;
    seen.push_back(s);
    cudaStream_t producer = s ? static_cast<cudaStream_t>(s) : cudaStreamLegacy;
    HVD_CUDA_CHECK(cudaEventRecord(producer_ev_, producer), ctx(c));
    HVD_CUDA_CHECK(cudaStreamWaitEvent(stream_, producer_ev_, 0), ctx(c));
  }
  return Status::OK();
}

// Grows a device buffer to `bytes`. The old one may still be read by enqueued work: the
// stream is synchronized before freeing it (growth is rare: the fusion buffer stops at the
// fusion threshold).
Status NcclTransport::ensure(void** buf, size_t* cap, size_t bytes, const std::string& c) {
  if (*cap >= bytes) return Status::OK();
  if (*buf) {
    HVD_CUDA_CHECK(cudaStreamSynchronize(stream_), ctx(c));
    HVD_CUDA_CHECK(cudaFree(*buf), ctx(c));
    *buf = nullptr;
    *cap = 0;
  }
  HVD_CUDA_CHECK(cudaMalloc(buf, bytes), ctx(c) + ", " + std::to_string(bytes) + " bytes");
  *cap = bytes;
  return Status::OK();
}

Status NcclTransport::alloc_output(DataType dtype, Shape shape, void* user_stream, Tensor* out,
                                   const std::string& c) {
  const size_t bytes = static_cast<size_t>(num_elements(shape)) * dtype_size(dtype);
  const int dev = device_;
  std::shared_ptr<void> mem;
  const std::string what = ctx(c) + ", output of " + std::to_string(bytes) + " bytes";
  cudaStream_t producer = user_stream ? static_cast<cudaStream_t>(user_stream) : cudaStreamLegacy;
  if (bytes > 0) {
    if (CudaAllocator alloc = installed_cuda_allocator()) {
      try {
        mem = alloc(bytes, dev, user_stream);
      } catch (const std::exception& e) {
        return Status::Backend("the CUDA allocator failed (" + what + "): " + e.what());
      }
      if (!mem) return Status::Backend("the CUDA allocator returned no memory (" + what + ")");
    } else {
      // The library's own stream-ordered pool: allocated for the producer's stream (where the
      // caller will use the result) and freed on it, without the device-wide synchronization
      // of cudaFree. Freed memory stays in the pool for the next outputs.
      if (!pool_) {
        cudaMemPoolProps props{};
        props.allocType = cudaMemAllocationTypePinned;
        props.location.type = cudaMemLocationTypeDevice;
        props.location.id = dev;
        HVD_CUDA_CHECK(cudaMemPoolCreate(&pool_, &props), what);
        uint64_t keep = UINT64_MAX;
        HVD_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep), what);
      }
      void* p = nullptr;
      HVD_CUDA_CHECK(cudaMallocFromPoolAsync(&p, bytes, pool_, producer), what);
      mem = std::shared_ptr<void>(p, [dev, producer](void* q) {
        // Freed from whichever thread drops the last copy of the result; errors (e.g. at
        // process exit, after the CUDA runtime unloaded) cannot be reported and are cleared.
        int prev = -1;
        if (cudaGetDevice(&prev) == cudaSuccess && cudaSetDevice(dev) == cudaSuccess) {
          if (cudaFreeAsync(q, producer) != cudaSuccess) {
            (void)cudaGetLastError();
            (void)cudaFree(q);  // e.g. the producer's stream is gone
          }
          if (prev >= 0) (void)cudaSetDevice(prev);
        }
        (void)cudaGetLastError();
      });
    }
    // Memory recycled from work still queued on the producer's stream (a stream-ordered
    // allocator) is written only after that work.
    HVD_CUDA_CHECK(cudaEventRecord(producer_ev_, producer), what);
    HVD_CUDA_CHECK(cudaStreamWaitEvent(stream_, producer_ev_, 0), what);
  }
  *out = Tensor::adopt(dtype, std::move(shape), Device::cuda(dev), std::move(mem));
  return Status::OK();
}

void NcclTransport::set_fatal(const std::string& why) {
  std::lock_guard<std::mutex> lk(mu_);
  if (fatal_.empty()) fatal_ = why;
}


// ---- run -----------------------------------------------------------------------------------

void NcclTransport::run(Batch& batch) {
  Batch b = std::move(batch);  // the GPU work goes on after this returns
  // Absent tensors (present false) are what joining means here: they contribute zeros.
  const std::string what = b.describe();
  std::vector<TensorResult> results(b.tensors.size());
  auto fail_now = [&](const Status& s) { b.done({s, std::move(results)}); };
  if (std::string f = fatal(); !f.empty()) {
    fail_now(Status::Backend(ctx(what) + ": the GPU data plane is unusable after an earlier "
                             "device error: " + f));
    return;
  }
  Status s = setup(what);
  if (s.ok()) s = wait_producers(b.tensors, what);
  const bool enqueued_any = s.ok();
  if (s.ok()) {
    switch (b.op) {
      case OpType::kAllreduce: s = allreduce(b, what); break;
      case OpType::kAllgather: s = allgather(b, &results[0], what); break;
      case OpType::kBroadcast: s = broadcast(b, what); break;
      case OpType::kAlltoall: s = alltoall(b, &results[0], what); break;
      case OpType::kReducescatter: s = reducescatter(b, &results[0], what); break;
      default:
        s = Status::InvalidArgument(ctx(what) + ": not supported on CUDA tensors");
        break;
    }
  }
  if (!enqueued_any || !stream_) {
    fail_now(s);
    return;
  }
  // Work may be on the stream (even after a failure part-way): complete once it has finished.
  Pending p;
  p.status = s;
  p.what = what;
  p.start = Clock::now();
  if (comm_) p.comms.push_back(comm_);
  if (local_comm_) p.comms.push_back(local_comm_);
  cudaError_t e = cudaEventCreateWithFlags(&p.event, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventRecord(p.event, stream_);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    const std::string why = "cudaEventRecord failed (" + ctx(what) + "): " + cuda_error_message(e);
    if (p.event) (void)cudaEventDestroy(p.event);
    // Without an event nothing tells when the stream is done: wait for it here, then fail.
    (void)cudaStreamSynchronize(stream_);
    (void)cudaGetLastError();
    set_fatal(why);
    fail_now(Status::Backend(why));
    return;
  }
  p.done = std::move(b.done);
  p.results = std::move(results);
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(std::move(p));
  }
  cv_.notify_all();
}


// ---- completion ----------------------------------------------------------------------------

// Polls the oldest batch's event (the stream runs batches in order), watching its
// communicators for asynchronous errors and the timeout, and completes the handles.
void NcclTransport::finalizer_loop() {
  bool device_set = false;
  std::unique_lock<std::mutex> lk(mu_);
  while (true) {
    cv_.wait(lk, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) {
      if (stop_) return;
      continue;
    }
    Pending& p = queue_.front();
    lk.unlock();
    if (!device_set) {
      device_set = cudaSetDevice(device_) == cudaSuccess;
      (void)cudaGetLastError();
    }
    Status outcome = p.status;
    bool done = false;
    const cudaError_t q = cudaEventQuery(p.event);
    if (q == cudaSuccess) {
      done = true;
    } else if (q != cudaErrorNotReady) {
      (void)cudaGetLastError();
      const std::string why = "the GPU failed while running " + ctx(p.what) + ": " + cuda_error_message(q);
      set_fatal(why);
      for (auto& comm : p.comms) {
        std::lock_guard<std::mutex> clk(comm->mu);
        abort_locked(*comm, why);
      }
      if (outcome.ok()) outcome = Status::Backend(why);
      done = true;
    } else if (!p.aborted) {
      std::string why;
      for (auto& comm : p.comms) {
        std::lock_guard<std::mutex> clk(comm->mu);
        if (comm->broken) {
          why = comm->why;
        } else if (comm->comm) {
          ncclResult_t state = ncclSuccess;
          const ncclResult_t r = ncclCommGetAsyncError(comm->comm, &state);
          if (r != ncclSuccess) state = r;
          if (state != ncclSuccess && state != ncclInProgress) {
            why = ctx(p.what) + ": NCCL error: " + nccl_error_message(state, comm->comm);
          }
        }
        const double waited = std::chrono::duration<double>(Clock::now() - p.start).count();
        if (why.empty() && o_.config.nccl_timeout_seconds > 0 && waited > o_.config.nccl_timeout_seconds) {
          why = ctx(p.what) + ": did not finish on the GPU within " +
                std::to_string(static_cast<long long>(o_.config.nccl_timeout_seconds)) +
                " s (HOROVOD_CPP_NCCL_TIMEOUT_SECONDS); is another rank stuck or gone?";
        }
        if (!why.empty()) abort_locked(*comm, why);
      }
      if (!why.empty()) {
        p.aborted = true;
        p.aborted_at = Clock::now();
        if (outcome.ok()) outcome = Status::Backend(why);
        p.status = outcome;
      }
    } else if (Clock::now() - p.aborted_at > kAfterAbortGrace) {
      outcome = Status::Backend(p.status.message() + " (the aborted work did not stop; the device may "
                                "still be using this tensor's memory)");
      set_fatal(outcome.message());
      done = true;
    }
    if (!done) {
      // Poll without sleeping for the first kSpinFor of a batch, then back off: a 50 us sleep
      // (which overshoots) was a large share of a GPU collective's time. A/B on one H100, two
      // alternated runs each (docs/benchmarks-history.md): 64 MiB allreduce 2.15-2.18x raw
      // NCCL with the sleep, 1.36-1.41x with the spin; 1000 x 256 floats 1.90-2.14 ms vs
      // 1.64-2.13 ms.
      if (Clock::now() - p.start < kSpinFor) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      lk.lock();
      continue;
    }
    (void)cudaEventDestroy(p.event);
    (void)cudaGetLastError();
    p.done({outcome, std::move(p.results)});
    lk.lock();
    queue_.pop_front();
    cv_.notify_all();
  }
}

void NcclTransport::drain() {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [this] { return queue_.empty(); });
}

NcclTransport::~NcclTransport() {
  drain();
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (finalizer_.joinable()) finalizer_.join();
  if (device_ < 0) return;  // never used a GPU
  // At process exit the CUDA runtime may already be gone: then leave everything to the OS.
  if (cudaSetDevice(device_) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  // Finalize (flushes; non-blocking: wait for it, bounded), then destroy; abort otherwise.
  auto destroy = [](const std::shared_ptr<Comm>& c) {
    if (!c) return;
    std::lock_guard<std::mutex> lk(c->mu);
    if (!c->comm || c->broken) return;
    ncclResult_t r = ncclCommFinalize(c->comm);
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (r == ncclInProgress && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      ncclResult_t state = ncclSuccess;
      r = ncclCommGetAsyncError(c->comm, &state);
      if (r == ncclSuccess) r = state;
    }
    if (r == ncclSuccess) {
      r = ncclCommDestroy(c->comm);
      if (r == ncclSuccess || r == ncclInProgress) {
        c->comm = nullptr;
        return;
      }
    }
    (void)ncclCommAbort(c->comm);
    c->comm = nullptr;
  };
  for (auto& [dev, c] : comms_) destroy(c);
  destroy(local_comm_);
  if (stream_) (void)cudaStreamSynchronize(stream_);
  if (fusion_) (void)cudaFree(fusion_);
  if (scratch_) (void)cudaFree(scratch_);
  if (host_buf_) (void)cudaFreeHost(host_buf_);
  if (producer_ev_) (void)cudaEventDestroy(producer_ev_);
  if (host_ev_) (void)cudaEventDestroy(host_ev_);
  if (stream_) (void)cudaStreamDestroy(stream_);
  (void)cudaGetLastError();
  cross_plane_.reset();  // before the group it runs over
}


}  // namespace nccl

std::unique_ptr<Transport> make_nccl_transport(const TransportContext& ctx) {
  nccl::Options o;
  o.set_id = ctx.set_id;
  o.rank = ctx.layout.rank;
  o.size = ctx.layout.size;
  o.global_ranks = ctx.layout.global_ranks;
  o.bootstrap = ctx.bootstrap;
  o.local_rank = ctx.local_rank;
  o.local_size = ctx.local_size;
  o.config = *ctx.config;
  return std::make_unique<nccl::NcclTransport>(std::move(o));
}

}  // namespace hvd
