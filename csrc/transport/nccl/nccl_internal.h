// Copyright horovod_cpp authors. The NCCL transport's insides, shared by its files:
//   nccl_transport.cc     run(), device buffers, stream/event ordering, the finalizer thread
//   nccl_comms.cc         the communicator cache: creation, agreement checks, settle, abort
//   nccl_collectives.cc   allreduce (flat, fused), allgather, broadcast, alltoall, reducescatter
//   nccl_hierarchical.cc  allreduce within hosts over NCCL and across hosts over the
//                         set's Bootstrap data plane (MPI); the staging of device bytes
//                         through pinned host memory (ensure_host, wait_for_stream)
//   nccl_adasum.cc        Adasum: staged to the host and combined there by a CpuTransport
//
// Threads. The process set's background thread calls run(): it issues CUDA and NCCL calls on
// this transport's stream and hands a Pending (an event plus the batch's done callback) to the
// finalizer thread, which reports the outcome once the event has completed. The two threads
// share the queue (mu_), `fatal_` (mu_) and each communicator's state (Comm::mu: NCCL calls on a
// communicator and its abort never overlap).
//
// Failures. A failed CUDA or NCCL call fails the tensors of its batch with a message naming
// the call, the tensors and the rank. Work already enqueued is still waited for before the
// batch completes, so the user never frees memory the device is using. A communicator with an
// asynchronous NCCL error, or whose work does not finish within HOROVOD_CPP_NCCL_TIMEOUT_SECONDS,
// is aborted (ncclCommAbort) and stays broken: later GPU collectives of the set fail at once
// with the reason (re-creating it would need every rank to agree). An error of the device
// itself (an event that fails: sticky errors such as an illegal address) makes every later GPU
// collective of this set fail with that error.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "transport/bootstrap.h"
#include "transport/data_plane.h"
#include "transport/nccl/gpu_check.h"
#include "transport/transport.h"
#include "common/config.h"
#include "kernels/cuda/cuda_kernels.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "horovod_cpp needs NCCL 2.14 or later (non-blocking communicators, ncclCommFinalize)"
#endif

namespace hvd {
namespace nccl {

using Clock = std::chrono::steady_clock;

/// Wraps a cuda_kernels.h launch (which returns a cudaError_t as int).
#define HVD_KERNEL_CHECK(call, ctx)                                                       \
  do {                                                                                    \
    int _hvd_ke = (call);                                                                 \
    if (_hvd_ke != 0) {                                                                   \
      (void)cudaGetLastError();                                                           \
      return ::hvd::Status::Backend(std::string(#call) + " failed at " __FILE__ ":" +     \
                                    std::to_string(__LINE__) + " (" + (ctx) +            \
                                    "): " + ::hvd::cuda::cuda_error_text(_hvd_ke));       \
    }                                                                                     \
  } while (0)

inline bool is_float(DataType d) { return is_floating_point(d); }

/// NCCL's type for `d`; InvalidArgument (naming `ctx`) for types NCCL cannot reduce.
Status nccl_type(DataType d, ncclDataType_t* out, const std::string& ctx);
/// The NCCL operator for `op` on `d` (see nccl_collectives.cc).
ncclRedOp_t nccl_op(DataType d, ReduceOp op, bool avg_ok);

struct Comm {
  ncclComm_t comm = nullptr;
  std::mutex mu;        // held while NCCL calls are issued on `comm` and while aborting it
  bool broken = false;  // guarded by mu
  std::string why;      // guarded by mu
};


/// Marks `c` broken and aborts it. Caller holds c.mu.
void abort_locked(Comm& c, const std::string& why);

/// What the transport of one set is built from (a copy of the TransportContext's parts).
struct Options {
  int set_id = 0;
  int rank = 0;  ///< this rank's index in the set
  int size = 1;
  std::vector<int> global_ranks;    ///< set rank -> global rank
  Bootstrap* bootstrap = nullptr;   ///< the set's members (not owned; outlives the transport)
  int local_rank = 0;               ///< this rank among the job's ranks on its host
  int local_size = 1;               ///< the job's ranks on this host
  Config config;
};

// A batch handed to the finalizer.
struct Pending {
  cudaEvent_t event = nullptr;
  std::function<void(BatchOutcome)> done;
  std::vector<TensorResult> results;
  Status status;  // OK, or the failure found while enqueuing (still waited for)
  std::vector<std::shared_ptr<Comm>> comms;
  std::string what;
  Clock::time_point start;
  bool aborted = false;
  Clock::time_point aborted_at;
};

class NcclTransport : public Transport {
 public:
  explicit NcclTransport(Options o) : o_(std::move(o)) {
    finalizer_ = std::thread([this] { finalizer_loop(); });
  }
  ~NcclTransport() override;

  const char* name() const override { return "nccl"; }
  /// Every collective on CUDA tensors that NCCL can run (others fail with a clear error).
  bool accepts(const Batch& b) const override { return b.device.is_cuda(); }
  bool claims_device(const Device& d) const override { return d.is_cuda(); }
  Status check_device(const Device& device, const std::string& what) const override;
  void run(Batch& batch) override;
  void drain() override;

 private:
  // "<what> on rank R (cuda:D)": the context of every message.
  std::string ctx(const std::string& what) const {
    return what + " on rank " + std::to_string(o_.global_ranks[static_cast<size_t>(o_.rank)]) +
           " (cuda:" + std::to_string(device_) + ")";
  }
  Status setup(const std::string& c);
  Status make_comm(Bootstrap& over, const std::string& c, std::shared_ptr<Comm>* out);
  Status check_agreement(const std::string& c);
  Status settle(Comm& comm, const std::string& c);
  Status wait_producers(const std::vector<BatchTensor>& ts, const std::string& c);
  Status ensure(void** buf, size_t* cap, size_t bytes, const std::string& c);
  // The output of allgather/alltoall/reducescatter: from the installed CudaAllocator or the
  // transport's stream-ordered pool, for the producer's stream `user_stream`; the transport's
  // stream then waits on user_stream.
  Status alloc_output(DataType dtype, Shape shape, void* user_stream, Tensor* out,
                      const std::string& c);

  Status allreduce(const Batch& b, const std::string& c);
  Status reduce_in_place(void* buf, int64_t count, const Batch& b, const std::string& c,
                         const void* src = nullptr);
  Status setup_hierarchical(const std::string& c);
  Status hierarchical_allreduce(void* buf, int64_t count, const Batch& b, const std::string& c);
  // Grows the pinned host buffer to `bytes` (the stream is synchronized before the old one is
  // freed: enqueued copies may still use it).
  Status ensure_host(size_t bytes, const std::string& c);
  // Blocks this thread until the work enqueued on the stream so far has finished, so that the
  // host may read what it copied to pinned memory. `watch` (may be null) is a communicator
  // with work of this batch on the stream: it is settled while waiting (a peer's failure or
  // the timeout aborts it instead of hanging here). `step` names the wait in messages.
  Status wait_for_stream(Comm* watch, const std::string& c, const std::string& step);
  // Adasum (nccl_adasum.cc): the batch is copied to pinned host memory, combined there by
  // host_adasum_ exactly as a batch of CPU tensors is, and copied back on the stream. A
  // failure before the host exchange is fatal (report_fatal): the peers wait in it.
  Status adasum_allreduce(const Batch& b, const std::string& c);
  Status allgather(const Batch& b, TensorResult* out, const std::string& c);
  Status broadcast(const Batch& b, const std::string& c);
  Status alltoall(const Batch& b, TensorResult* out, const std::string& c);
  Status reducescatter(const Batch& b, TensorResult* out, const std::string& c);

  // Runs `issue` (NCCL calls on comm) inside a group with comm's lock held, then settles.
  Status nccl_group(Comm& comm, const std::string& c, const std::function<Status()>& issue);
  void finalizer_loop();
  void set_fatal(const std::string& why);
  std::string fatal() {
    std::lock_guard<std::mutex> lk(mu_);
    return fatal_;
  }

  Options o_;
  int device_ = -1;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t producer_ev_ = nullptr;
  cudaEvent_t host_ev_ = nullptr;  // recorded when the host waits for the stream
  bool agreed_ = false;
  std::shared_ptr<Comm> comm_;  // the set's communicator on device_ (one device per rank)
  std::map<int, std::shared_ptr<Comm>> comms_;  // device -> communicator
  // Hierarchical allreduce: set members on this host (local) and same-local-rank peers (cross).
  bool hier_checked_ = false;
  bool hier_usable_ = false;
  std::unique_ptr<Bootstrap> local_group_, cross_group_;
  int local_rank_ = 0, local_size_ = 1, cross_size_ = 1;
  std::shared_ptr<Comm> local_comm_;
  std::unique_ptr<DataPlane> cross_plane_;  // over cross_group_ (reset before it)
  void* host_buf_ = nullptr;  // pinned: the hierarchical shard, or an Adasum batch
  size_t host_cap_ = 0;
  // Adasum: a CpuTransport over the set's Bootstrap data plane, made on first use, and the
  // host batch it is given (kept: its vectors are reused from batch to batch).
  std::unique_ptr<Transport> host_adasum_;
  Batch host_batch_;
  void* fusion_ = nullptr;  // device fusion buffer
  size_t fusion_cap_ = 0;
  cudaMemPool_t pool_ = nullptr;  // outputs without an installed allocator; never destroyed
                                  // (results may outlive the transport)
  void* scratch_ = nullptr;  // device scratch (zeros for joined ranks, prescaled inputs)
  size_t scratch_cap_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;  // guarded by mu_
  bool stop_ = false;          // guarded by mu_
  std::string fatal_;          // guarded by mu_
  std::thread finalizer_;
};

}  // namespace nccl
}  // namespace hvd
