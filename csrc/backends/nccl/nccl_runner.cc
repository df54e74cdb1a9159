// Copyright horovod_cpp authors. The GPU data plane over NCCL (see nccl_runner.h).
//
// Threads. The process set's background thread calls run(): it issues CUDA and NCCL calls on
// this runner's stream and hands a Pending (an event plus the entries) to the finalizer thread,
// which completes the handles once the event has completed. The two threads share the queue
// (mu_), `fatal_` (mu_) and each communicator's state (Comm::mu: NCCL calls on a communicator
// and its abort never overlap).
//
// Failures. A failed CUDA or NCCL call fails the tensors of its batch with a message naming
// the call, the tensors and the rank. Work already enqueued is still waited for before the
// handles complete, so the user never frees memory the device is using. A communicator with an
// asynchronous NCCL error, or whose work does not finish within HOROVOD_CPP_NCCL_TIMEOUT_SECONDS,
// is aborted (ncclCommAbort) and stays broken: later GPU collectives of the set fail at once
// with the reason (re-creating it would need every rank to agree). An error of the device
// itself (an event that fails: sticky errors such as an illegal address) makes every later GPU
// collective of this set fail with that error.
#include "backends/nccl/nccl_runner.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "backends/mpi/mpi_data_plane.h"
#include "backends/nccl/gpu_check.h"
#include "backends/nccl/gpu_device.h"
#include "common/logging.h"
#include "core/fatal.h"
#include "cuda/cuda_kernels.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "horovod_cpp needs NCCL 2.14 or later (non-blocking communicators, ncclCommFinalize)"
#endif

namespace hvd {
namespace {

using Clock = std::chrono::steady_clock;

// After an abort, how long the finalizer still waits for a batch's event before failing its
// handles regardless (the aborted kernels normally end at once).
constexpr auto kAfterAbortGrace = std::chrono::seconds(10);

/// Wraps a cuda_kernels.h launch (which returns a cudaError_t as int).
#define HVD_KERNEL_CHECK(call, ctx)                                                       \
  do {                                                                                    \
    int _hvd_ke = (call);                                                                 \
    if (_hvd_ke != 0) {                                                                   \
      (void)cudaGetLastError();                                                           \
      return ::hvd::Status::Backend(std::string(#call) + " failed (" + (ctx) +            \
                                    "): " + ::hvd::cuda::cuda_error_text(_hvd_ke));       \
    }                                                                                     \
  } while (0)

bool is_float(DataType d) { return is_floating_point(d); }

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
    case DataType::kInt16: break;
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
  }
  return ncclSum;
}

// "allreduce 'a'" or "fused allreduce of 'a', 'b', ..." for messages.
std::string describe_batch(const std::vector<const Response*>& rs) {
  if (rs.size() == 1) return std::string(op_type_name(rs[0]->op)) + " '" + rs[0]->name + "'";
  std::string s = "fused " + std::string(op_type_name(rs[0]->op)) + " of ";
  for (size_t k = 0; k < rs.size() && k < 8; ++k) s += (k ? ", '" : "'") + rs[k]->name + "'";
  if (rs.size() > 8) s += ", ... (" + std::to_string(rs.size()) + " tensors)";
  return s;
}

struct Comm {
  ncclComm_t comm = nullptr;
  std::mutex mu;        // held while NCCL calls are issued on `comm` and while aborting it
  bool broken = false;  // guarded by mu
  std::string why;      // guarded by mu
};

/// Marks `c` broken and aborts it. Caller holds c.mu.
void abort_locked(Comm& c, const std::string& why) {
  if (c.broken) return;
  c.broken = true;
  c.why = why;
  if (c.comm) {
    HVD_LOG(kError) << "aborting NCCL communicator: " << why;
    // The peers may be waiting in the aborted work: the job ends (core/fatal.h).
    report_fatal("NCCL communicator aborted: " + why);
    const ncclResult_t r = ncclCommAbort(c.comm);
    if (r != ncclSuccess) {
      HVD_LOG(kError) << "ncclCommAbort failed: " << ncclGetErrorString(r);
    }
    c.comm = nullptr;
  }
}

// A batch handed to the finalizer.
struct Pending {
  cudaEvent_t event = nullptr;
  std::vector<TensorEntry> entries;
  Status status;  // OK, or the failure found while enqueuing (still waited for)
  std::vector<std::shared_ptr<Comm>> comms;
  std::string what;
  Clock::time_point start;
  bool aborted = false;
  Clock::time_point aborted_at;
};

class NcclRunner : public DeviceRunner {
 public:
  explicit NcclRunner(NcclRunnerOptions o) : o_(std::move(o)) {
    finalizer_ = std::thread([this] { finalizer_loop(); });
  }
  ~NcclRunner() override;

  void run(const FusionBatch& batch, const std::vector<const Response*>& rs,
           std::vector<TensorEntry>& entries, const std::vector<bool>& present,
           bool joined) override;
  void drain() override;

 private:
  // "<what> on rank R (cuda:D)": the context of every message.
  std::string ctx(const std::string& what) const {
    return what + " on rank " + std::to_string(o_.global_ranks[static_cast<size_t>(o_.rank)]) +
           " (cuda:" + std::to_string(device_) + ")";
  }
  Status setup(const std::string& c);
  Status make_comm(MPI_Comm over, int rank, int size, const std::string& c,
                   std::shared_ptr<Comm>* out);
  Status check_agreement(const std::string& c);
  Status settle(Comm& comm, const std::string& c);
  Status wait_producers(const std::vector<TensorEntry>& es, const std::vector<bool>& present,
                        const std::string& c);
  Status ensure(void** buf, size_t* cap, size_t bytes, const std::string& c);
  Status alloc_output(DataType dtype, Shape shape, Tensor* out, const std::string& c);

  Status allreduce(const FusionBatch& batch, const std::vector<const Response*>& rs,
                   std::vector<TensorEntry>& es, const std::vector<bool>& present,
                   const std::string& c);
  Status reduce_in_place(void* buf, int64_t count, const Response& r, const std::string& c);
  Status setup_hierarchical(const std::string& c);
  Status hierarchical_allreduce(void* buf, int64_t count, const Response& r, const std::string& c);
  Status allgather(const Response& r, TensorEntry& e, const std::string& c);
  Status broadcast(const Response& r, TensorEntry& e, const std::string& c);
  Status alltoall(const Response& r, TensorEntry& e, const std::string& c);
  Status reducescatter(const Response& r, TensorEntry& e, const std::string& c);

  // Runs `issue` (NCCL calls on comm) inside a group with comm's lock held, then settles.
  Status nccl_group(Comm& comm, const std::string& c, const std::function<Status()>& issue);
  void finalizer_loop();
  void set_fatal(const std::string& why);
  std::string fatal() {
    std::lock_guard<std::mutex> lk(mu_);
    return fatal_;
  }

  NcclRunnerOptions o_;
  int device_ = -1;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t producer_ev_ = nullptr;
  cudaEvent_t hier_ev_ = nullptr;
  bool agreed_ = false;
  std::shared_ptr<Comm> comm_;  // the set's communicator on device_ (one device per rank)
  std::map<int, std::shared_ptr<Comm>> comms_;  // device -> communicator
  // Hierarchical allreduce: set members on this host (local) and same-local-rank peers (cross).
  bool hier_checked_ = false;
  bool hier_usable_ = false;
  MPI_Comm local_mpi_ = MPI_COMM_NULL, cross_mpi_ = MPI_COMM_NULL;
  int local_rank_ = 0, local_size_ = 1, cross_size_ = 1;
  std::shared_ptr<Comm> local_comm_;
  std::unique_ptr<MpiDataPlane> cross_plane_;
  void* host_buf_ = nullptr;  // pinned
  size_t host_cap_ = 0;
  void* fusion_ = nullptr;  // device fusion buffer
  size_t fusion_cap_ = 0;
  void* scratch_ = nullptr;  // device scratch (zeros for joined ranks, prescaled inputs)
  size_t scratch_cap_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;  // guarded by mu_
  bool stop_ = false;          // guarded by mu_
  std::string fatal_;          // guarded by mu_
  std::thread finalizer_;
};

// ---- setup ---------------------------------------------------------------------------------

Status NcclRunner::setup(const std::string& c) {
  if (device_ < 0) {
    device_ = chosen_cuda_device(o_.config, o_.mpi->local_rank());
  }
  HVD_CUDA_CHECK(cudaSetDevice(device_), ctx(c));
  if (!stream_) {
    HVD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), ctx(c));
    HVD_CUDA_CHECK(cudaEventCreateWithFlags(&producer_ev_, cudaEventDisableTiming), ctx(c));
    HVD_CUDA_CHECK(cudaEventCreateWithFlags(&hier_ev_, cudaEventDisableTiming), ctx(c));
  }
  if (!agreed_) {
    HVD_RETURN_IF_ERROR(check_agreement(c));
    agreed_ = true;
  }
  auto it = comms_.find(device_);
  if (it == comms_.end()) {
    std::shared_ptr<Comm> comm;
    HVD_RETURN_IF_ERROR(make_comm(o_.data_comm, o_.rank, o_.size, c, &comm));
    it = comms_.emplace(device_, std::move(comm)).first;
  }
  comm_ = it->second;
  return Status::OK();
}

// Every member checks, before its first communicator, that no two members of the set on one
// host use the same GPU (NCCL before 2.30 refuses that, or hangs) and that
// HOROVOD_HIERARCHICAL_ALLREDUCE agrees (otherwise ranks would issue different NCCL calls).
Status NcclRunner::check_agreement(const std::string& c) {
  struct Info {
    char host[64];
    int device;
    int hierarchical;
  };
  Info mine{};
  if (gethostname(mine.host, sizeof(mine.host) - 1) != 0) std::strcpy(mine.host, "?");
  mine.device = device_;
  mine.hierarchical = o_.config.hierarchical_allreduce ? 1 : 0;
  std::vector<Info> all(static_cast<size_t>(o_.size));
  HVD_MPI_CHECK(MPI_Allgather(&mine, sizeof(Info), MPI_BYTE, all.data(), sizeof(Info), MPI_BYTE,
                              o_.data_comm));
  for (int r = 0; r < o_.size; ++r) {
    const Info& a = all[static_cast<size_t>(r)];
    if (a.hierarchical != all[0].hierarchical) {
      return Status::InvalidArgument(ctx(c) + ": HOROVOD_HIERARCHICAL_ALLREDUCE must be the same "
                                     "on every rank (rank " + std::to_string(o_.global_ranks[0]) +
                                     " has " + std::to_string(all[0].hierarchical) + ", rank " +
                                     std::to_string(o_.global_ranks[static_cast<size_t>(r)]) +
                                     " has " + std::to_string(a.hierarchical) + ")");
    }
    for (int q = 0; q < r; ++q) {
      const Info& b = all[static_cast<size_t>(q)];
      if (a.device == b.device && std::strncmp(a.host, b.host, sizeof(a.host)) == 0) {
        return Status::InvalidArgument(
            ctx(c) + ": ranks " + std::to_string(o_.global_ranks[static_cast<size_t>(q)]) +
            " and " + std::to_string(o_.global_ranks[static_cast<size_t>(r)]) + " both use cuda:" +
            std::to_string(a.device) + " on host " + a.host +
            "; NCCL (before 2.30) refuses two ranks on one GPU: start at most one rank per GPU");
      }
    }
  }
  return Status::OK();
}

// Makes a communicator of `size` ranks over the MPI communicator `over` (collective over it):
// `over`'s rank 0 makes the unique id and broadcasts it. Non-blocking NCCL communicators, so
// that no NCCL call can block this thread for longer than the timeout.
Status NcclRunner::make_comm(MPI_Comm over, int rank, int size, const std::string& c,
                             std::shared_ptr<Comm>* out) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  int ok = 1;
  std::string err;
  if (rank == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
      ok = 0;
      err = "ncclGetUniqueId failed (" + ctx(c) + "): " + nccl_error_message(r, nullptr);
    }
  }
  // Every rank learns whether rank 0 succeeded, so none waits in ncclCommInitRank alone.
  HVD_MPI_CHECK(MPI_Bcast(&ok, 1, MPI_INT, 0, over));
  if (!ok) {
    return Status::Backend(rank == 0 ? err : ctx(c) + ": ncclGetUniqueId failed on rank 0 of the set");
  }
  HVD_MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, over));
  auto comm = std::make_shared<Comm>();
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  std::lock_guard<std::mutex> lk(comm->mu);
  const ncclResult_t r = ncclCommInitRankConfig(&comm->comm, size, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    const std::string why = "ncclCommInitRankConfig failed (" + ctx(c) + "): " +
                            nccl_error_message(r, comm->comm);
    abort_locked(*comm, why);  // frees a half-made communicator
    return Status::Backend(why);
  }
  HVD_RETURN_IF_ERROR(settle(*comm, c + ": creating the NCCL communicator"));
  *out = std::move(comm);
  return Status::OK();
}

// Waits until the last NCCL call on `comm` is no longer in progress. An error or the timeout
// aborts the communicator. Caller holds comm.mu.
Status NcclRunner::settle(Comm& comm, const std::string& c) {
  const double timeout = o_.config.nccl_timeout_seconds;
  const auto start = Clock::now();
  while (true) {
    if (comm.broken || !comm.comm) return Status::Backend(ctx(c) + ": NCCL communicator broken: " + comm.why);
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm.comm, &state);
    if (r != ncclSuccess) state = r;
    if (state == ncclSuccess) return Status::OK();
    if (state != ncclInProgress) {
      const std::string why = ctx(c) + ": NCCL error: " + nccl_error_message(state, comm.comm);
      abort_locked(comm, why);
      return Status::Backend(why);
    }
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (timeout > 0 && waited > timeout) {
      const std::string why = ctx(c) + ": NCCL call did not complete within " +
                              std::to_string(static_cast<long long>(timeout)) +
                              " s (HOROVOD_CPP_NCCL_TIMEOUT_SECONDS); is another rank stuck or gone?";
      abort_locked(comm, why);
      return Status::Backend(why);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

Status NcclRunner::nccl_group(Comm& comm, const std::string& c, const std::function<Status()>& issue) {
  std::lock_guard<std::mutex> lk(comm.mu);
  if (comm.broken || !comm.comm) {
    return Status::Backend(ctx(c) + ": the NCCL communicator was aborted earlier: " + comm.why);
  }
  HVD_NCCL_CHECK(ncclGroupStart(), comm.comm, ctx(c));
  Status s = issue();
  // The group is always closed, even after a failed call, so NCCL's state stays consistent.
  const ncclResult_t end = ncclGroupEnd();
  if (s.ok() && end != ncclSuccess && end != ncclInProgress) {
    s = Status::Backend("ncclGroupEnd() failed (" + ctx(c) + "): " + nccl_error_message(end, comm.comm));
  }
  if (!s.ok()) {
    abort_locked(comm, s.message());  // a half-issued group leaves peers waiting: abort
    return s;
  }
  return settle(comm, c);
}

// The stream waits for the producers' pending work: an event recorded now on each distinct
// producer stream (the legacy default stream when none was given).
Status NcclRunner::wait_producers(const std::vector<TensorEntry>& es, const std::vector<bool>& present,
                                  const std::string& c) {
  std::vector<void*> seen;
  for (size_t k = 0; k < es.size(); ++k) {
    if (!present[k]) continue;
    void* s = es[k].input.stream;
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
Status NcclRunner::ensure(void** buf, size_t* cap, size_t bytes, const std::string& c) {
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

Status NcclRunner::alloc_output(DataType dtype, Shape shape, Tensor* out, const std::string& c) {
  const size_t bytes = static_cast<size_t>(num_elements(shape)) * dtype_size(dtype);
  void* p = nullptr;
  if (bytes > 0) {
    HVD_CUDA_CHECK(cudaMalloc(&p, bytes), ctx(c) + ", output of " + std::to_string(bytes) + " bytes");
  }
  const int dev = device_;
  std::shared_ptr<void> mem(p, [dev](void* q) {
    if (!q) return;
    // Freed from whichever thread drops the last copy of the result; errors (e.g. at process
    // exit, after the CUDA runtime unloaded) cannot be reported and are cleared.
    int prev = -1;
    if (cudaGetDevice(&prev) == cudaSuccess && cudaSetDevice(dev) == cudaSuccess) {
      (void)cudaFree(q);
      if (prev >= 0) (void)cudaSetDevice(prev);
    }
    (void)cudaGetLastError();
  });
  *out = Tensor::adopt(dtype, std::move(shape), Device::cuda(dev), std::move(mem));
  return Status::OK();
}

void NcclRunner::set_fatal(const std::string& why) {
  std::lock_guard<std::mutex> lk(mu_);
  if (fatal_.empty()) fatal_ = why;
}

// ---- run -----------------------------------------------------------------------------------

void NcclRunner::run(const FusionBatch& batch, const std::vector<const Response*>& rs,
                     std::vector<TensorEntry>& entries, const std::vector<bool>& present,
                     bool joined) {
  (void)joined;  // absent entries (present[k] false) are what joining means here
  const std::string what = describe_batch(rs);
  const Response& r0 = *rs.front();
  auto fail_now = [&](const Status& s) {
    for (size_t k = 0; k < entries.size(); ++k) {
      if (present[k]) entries[k].handle->complete(s);
    }
  };
  if (std::string f = fatal(); !f.empty()) {
    fail_now(Status::Backend(ctx(what) + ": the GPU data plane is unusable after an earlier "
                             "device error: " + f));
    return;
  }
  Status s = setup(what);
  if (s.ok()) s = wait_producers(entries, present, what);
  const bool enqueued_any = s.ok();
  if (s.ok()) {
    switch (r0.op) {
      case OpType::kAllreduce: s = allreduce(batch, rs, entries, present, what); break;
      case OpType::kAllgather: s = allgather(r0, entries[0], what); break;
      case OpType::kBroadcast: s = broadcast(r0, entries[0], what); break;
      case OpType::kAlltoall: s = alltoall(r0, entries[0], what); break;
      case OpType::kReducescatter: s = reducescatter(r0, entries[0], what); break;
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
  for (size_t k = 0; k < entries.size(); ++k) {
    if (present[k]) p.entries.push_back(std::move(entries[k]));
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(std::move(p));
  }
  cv_.notify_all();
}

// ---- allreduce -----------------------------------------------------------------------------

// Reduces `count` elements of `buf` (device memory) in place with r's op and scale factors,
// except the prescale (applied by the copy in) and the postscale (the copy out applies it when
// `fused`; see allreduce()).
Status NcclRunner::reduce_in_place(void* buf, int64_t count, const Response& r, const std::string& c) {
  if (o_.config.hierarchical_allreduce && o_.size > 1) {
    HVD_RETURN_IF_ERROR(setup_hierarchical(c));
    if (hier_usable_) return hierarchical_allreduce(buf, count, r, c);
  }
  ncclDataType_t t;
  HVD_RETURN_IF_ERROR(nccl_type(r.dtype, &t, ctx(c)));
  const ncclRedOp_t op = nccl_op(r.dtype, r.reduce_op, /*avg_ok=*/true);
  Comm& comm = *comm_;
  HVD_RETURN_IF_ERROR(nccl_group(comm, c, [&]() -> Status {
    HVD_NCCL_CHECK(ncclAllReduce(buf, buf, static_cast<size_t>(count), t, op, comm.comm, stream_),
                   comm.comm, ctx(c));
    return Status::OK();
  }));
  if (r.reduce_op == ReduceOp::kAverage && !is_float(r.dtype) && r.dtype != DataType::kBool) {
    HVD_KERNEL_CHECK(cuda::divide_integers(buf, count, r.dtype, o_.size, stream_), ctx(c));
  }
  return Status::OK();
}

Status NcclRunner::allreduce(const FusionBatch& batch, const std::vector<const Response*>& rs,
                             std::vector<TensorEntry>& es, const std::vector<bool>& present,
                             const std::string& c) {
  const Response& r0 = *rs[0];
  const size_t esize = dtype_size(r0.dtype);
  const bool fp = is_float(r0.dtype);
  bool hier = false;
  if (o_.config.hierarchical_allreduce && o_.size > 1) {
    HVD_RETURN_IF_ERROR(setup_hierarchical(c));
    hier = hier_usable_;
  }
  // Hierarchical reduction (in ncclAvg's absence) divides by the size in the post-scale.
  double post = r0.postscale;
  if (hier && fp && r0.reduce_op == ReduceOp::kAverage) post /= static_cast<double>(o_.size);

  if (!batch.fused() && present[0] && !hier) {
    // One tensor: reduce in the output itself (out of place: copy in, with the prescale).
    TensorEntry& e = es[0];
    const int64_t count = num_elements(r0.shape);
    if (count == 0) return Status::OK();
    if (e.output.data != e.input.data || (fp && r0.prescale != 1.0)) {
      cuda::CopyItem item{e.input.data, e.output.data, count};
      HVD_KERNEL_CHECK(cuda::batched_copy_scale(&item, 1, r0.dtype, fp ? r0.prescale : 1.0, stream_), ctx(c));
    }
    HVD_RETURN_IF_ERROR(reduce_in_place(e.output.data, count, r0, c));
    if (fp && post != 1.0) {
      HVD_KERNEL_CHECK(cuda::scale_in_place(e.output.data, count, r0.dtype, post, stream_), ctx(c));
    }
    return Status::OK();
  }

  // Through the fusion buffer: batched copy in (prescaled; zeros for tensors this joined rank
  // did not submit), one reduction, batched copy out (postscaled). Hierarchical reductions
  // pad the buffer to a multiple of the local size for the reduce-scatter.
  int64_t count = batch.fused() ? batch.bytes / static_cast<int64_t>(esize) : num_elements(r0.shape);
  const int64_t padded = hier ? (count + local_size_ - 1) / local_size_ * local_size_ : count;
  if (padded == 0) return Status::OK();
  HVD_RETURN_IF_ERROR(ensure(&fusion_, &fusion_cap_, static_cast<size_t>(padded) * esize, c));
  unsigned char* buf = static_cast<unsigned char*>(fusion_);
  std::vector<cuda::CopyItem> in, out;
  for (size_t k = 0; k < es.size(); ++k) {
    const int64_t off = batch.fused() ? batch.offsets[k] : 0;
    const int64_t n = num_elements(rs[k]->shape);
    if (present[k]) {
      in.push_back({es[k].input.data, buf + off, n});
      out.push_back({buf + off, es[k].output.data, n});
    } else if (n > 0) {
      HVD_CUDA_CHECK(cudaMemsetAsync(buf + off, 0, static_cast<size_t>(n) * esize, stream_), ctx(c));
    }
  }
  if (padded > count) {
    HVD_CUDA_CHECK(cudaMemsetAsync(buf + count * static_cast<int64_t>(esize), 0,
                                   static_cast<size_t>(padded - count) * esize, stream_), ctx(c));
  }
  HVD_KERNEL_CHECK(cuda::batched_copy_scale(in.data(), in.size(), r0.dtype, fp ? r0.prescale : 1.0, stream_), ctx(c));
  HVD_RETURN_IF_ERROR(reduce_in_place(buf, padded, r0, c));
  HVD_KERNEL_CHECK(cuda::batched_copy_scale(out.data(), out.size(), r0.dtype, fp ? post : 1.0, stream_), ctx(c));
  return Status::OK();
}

// Splits the set into hosts (MPI shared-memory domains): usable when there are several hosts
// with the same number of members each; otherwise the flat allreduce is as good, and is used.
Status NcclRunner::setup_hierarchical(const std::string& c) {
  if (hier_checked_) return Status::OK();
  hier_checked_ = true;
  HVD_MPI_CHECK(MPI_Comm_split_type(o_.data_comm, MPI_COMM_TYPE_SHARED, o_.rank, MPI_INFO_NULL, &local_mpi_));
  HVD_MPI_CHECK(MPI_Comm_rank(local_mpi_, &local_rank_));
  HVD_MPI_CHECK(MPI_Comm_size(local_mpi_, &local_size_));
  HVD_MPI_CHECK(MPI_Comm_split(o_.data_comm, local_rank_, o_.rank, &cross_mpi_));
  HVD_MPI_CHECK(MPI_Comm_size(cross_mpi_, &cross_size_));
  int sizes[2] = {local_size_, -local_size_};
  HVD_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT, MPI_MAX, o_.data_comm));
  const bool homogeneous = sizes[0] == -sizes[1];
  if (!homogeneous || cross_size_ == 1 || local_size_ == 1) {
    HVD_LOG(kInfo) << "process set " << o_.set_id << ": HOROVOD_HIERARCHICAL_ALLREDUCE set but "
                   << (homogeneous ? (cross_size_ == 1 ? "all ranks share one host"
                                                       : "each host has one rank")
                                   : "hosts have different numbers of ranks")
                   << "; using the flat NCCL allreduce";
    hier_usable_ = false;
    return Status::OK();
  }
  HVD_RETURN_IF_ERROR(make_comm(local_mpi_, local_rank_, local_size_, c, &local_comm_));
  cross_plane_ = std::make_unique<MpiDataPlane>(o_.mpi, cross_mpi_, o_.config.reduce_chunk_bytes);
  hier_usable_ = true;
  return Status::OK();
}

// NCCL reduce-scatter within the host, MPI allreduce of this rank's shard across hosts (through
// pinned host memory), NCCL allgather within the host. `count` is a multiple of the local size.
// Blocks this thread while the shard crosses hosts (MPI needs the data on the host).
Status NcclRunner::hierarchical_allreduce(void* buf, int64_t count, const Response& r,
                                          const std::string& c) {
  ncclDataType_t t;
  HVD_RETURN_IF_ERROR(nccl_type(r.dtype, &t, ctx(c)));
  const ncclRedOp_t op = nccl_op(r.dtype, r.reduce_op, /*avg_ok=*/false);
  const size_t esize = dtype_size(r.dtype);
  const int64_t shard = count / local_size_;
  unsigned char* mine = static_cast<unsigned char*>(buf) + shard * local_rank_ * static_cast<int64_t>(esize);
  const size_t shard_bytes = static_cast<size_t>(shard) * esize;
  Comm& local = *local_comm_;
  HVD_RETURN_IF_ERROR(nccl_group(local, c + " (hierarchical: reduce-scatter within the host)", [&]() -> Status {
    HVD_NCCL_CHECK(ncclReduceScatter(buf, mine, static_cast<size_t>(shard), t, op, local.comm, stream_),
                   local.comm, ctx(c));
    return Status::OK();
  }));
  if (host_cap_ < shard_bytes) {
    if (host_buf_) {
      HVD_CUDA_CHECK(cudaStreamSynchronize(stream_), ctx(c));
      HVD_CUDA_CHECK(cudaFreeHost(host_buf_), ctx(c));
      host_buf_ = nullptr;
      host_cap_ = 0;
    }
    HVD_CUDA_CHECK(cudaMallocHost(&host_buf_, shard_bytes), ctx(c));
    host_cap_ = shard_bytes;
  }
  HVD_CUDA_CHECK(cudaMemcpyAsync(host_buf_, mine, shard_bytes, cudaMemcpyDeviceToHost, stream_), ctx(c));
  HVD_CUDA_CHECK(cudaEventRecord(hier_ev_, stream_), ctx(c));
  // Wait for the shard, watching the local communicator (a peer's failure must not hang us).
  const auto start = Clock::now();
  while (true) {
    const cudaError_t q = cudaEventQuery(hier_ev_);
    if (q == cudaSuccess) break;
    if (q != cudaErrorNotReady) {
      HVD_CUDA_CHECK(q, ctx(c) + " (hierarchical: waiting for the reduce-scatter)");
    }
    {
      std::lock_guard<std::mutex> lk(local.mu);
      Status s = settle(local, c + " (hierarchical: reduce-scatter within the host)");
      if (!s.ok()) return s;
    }
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (o_.config.nccl_timeout_seconds > 0 && waited > o_.config.nccl_timeout_seconds) {
      const std::string why = ctx(c) + ": the reduce-scatter within the host did not finish within " +
                              std::to_string(static_cast<long long>(o_.config.nccl_timeout_seconds)) +
                              " s (HOROVOD_CPP_NCCL_TIMEOUT_SECONDS)";
      std::lock_guard<std::mutex> lk(local.mu);
      abort_locked(local, why);
      return Status::Backend(why);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  // Across hosts: the MPI data plane reduces half types with its own operators; Average
  // travels as Sum (the caller's post-scale divides).
  const ReduceOp cross_op = r.reduce_op == ReduceOp::kAverage ? ReduceOp::kSum : r.reduce_op;
  Status s = cross_plane_->allreduce(host_buf_, shard, r.dtype, cross_op);
  if (!s.ok()) return Status(s.code(), ctx(c) + " (hierarchical: allreduce across hosts): " + s.message());
  HVD_CUDA_CHECK(cudaMemcpyAsync(mine, host_buf_, shard_bytes, cudaMemcpyHostToDevice, stream_), ctx(c));
  HVD_RETURN_IF_ERROR(nccl_group(local, c + " (hierarchical: allgather within the host)", [&]() -> Status {
    HVD_NCCL_CHECK(ncclAllGather(mine, buf, static_cast<size_t>(shard), t, local.comm, stream_),
                   local.comm, ctx(c));
    return Status::OK();
  }));
  if (r.reduce_op == ReduceOp::kAverage && !is_float(r.dtype) && r.dtype != DataType::kBool) {
    HVD_KERNEL_CHECK(cuda::divide_integers(buf, count, r.dtype, o_.size, stream_), ctx(c));
  }
  return Status::OK();
}

// ---- other collectives ---------------------------------------------------------------------

Status NcclRunner::allgather(const Response& r, TensorEntry& e, const std::string& c) {
  const int64_t row_bytes = num_elements(Shape(r.shape.begin() + 1, r.shape.end())) *
                            static_cast<int64_t>(dtype_size(r.dtype));
  Shape out_shape = r.shape;
  int64_t rows = 0;
  bool equal = true;
  for (int64_t d : r.first_dims) {
    rows += d;
    equal = equal && d == r.first_dims[0];
  }
  out_shape[0] = rows;
  Tensor out;
  HVD_RETURN_IF_ERROR(alloc_output(r.dtype, out_shape, &out, c));
  unsigned char* dst = static_cast<unsigned char*>(out.data());
  if (rows > 0 && row_bytes > 0) {
    Comm& comm = *comm_;
    HVD_RETURN_IF_ERROR(nccl_group(comm, c, [&]() -> Status {
      if (equal) {
        HVD_NCCL_CHECK(ncclAllGather(e.input.data, dst, static_cast<size_t>(r.first_dims[0] * row_bytes),
                                     ncclUint8, comm.comm, stream_), comm.comm, ctx(c));
        return Status::OK();
      }
      // Variable first dimension: each rank's block is a broadcast from that rank, in one group.
      int64_t off = 0;
      for (int k = 0; k < o_.size; ++k) {
        const int64_t bytes = r.first_dims[static_cast<size_t>(k)] * row_bytes;
        if (bytes > 0) {
          HVD_NCCL_CHECK(ncclBroadcast(e.input.data, dst + off, static_cast<size_t>(bytes), ncclUint8,
                                       k, comm.comm, stream_), comm.comm, ctx(c));
        }
        off += bytes;
      }
      return Status::OK();
    }));
  }
  e.handle->set_result(e.part, std::move(out));
  return Status::OK();
}

Status NcclRunner::broadcast(const Response& r, TensorEntry& e, const std::string& c) {
  auto it = std::find(o_.global_ranks.begin(), o_.global_ranks.end(), r.root);
  if (it == o_.global_ranks.end()) {
    return Status::InvalidArgument(ctx(c) + ": root rank " + std::to_string(r.root) + " is not in the set");
  }
  const int root = static_cast<int>(it - o_.global_ranks.begin());
  const size_t bytes = static_cast<size_t>(e.output.nbytes());
  if (bytes == 0) return Status::OK();
  Comm& comm = *comm_;
  return nccl_group(comm, c, [&]() -> Status {
    HVD_NCCL_CHECK(ncclBroadcast(e.output.data, e.output.data, bytes, ncclUint8, root, comm.comm, stream_),
                   comm.comm, ctx(c));
    return Status::OK();
  });
}

Status NcclRunner::alltoall(const Response& r, TensorEntry& e, const std::string& c) {
  const size_t n = static_cast<size_t>(o_.size);
  const size_t me = static_cast<size_t>(o_.rank);
  const int64_t row_bytes = num_elements(Shape(r.shape.begin() + 1, r.shape.end())) *
                            static_cast<int64_t>(dtype_size(r.dtype));
  std::vector<int64_t> send(n), recv(n), recv_rows(n);
  int64_t rows = 0;
  for (size_t k = 0; k < n; ++k) {
    send[k] = r.all_splits[me * n + k] * row_bytes;
    recv_rows[k] = r.all_splits[k * n + me];
    recv[k] = recv_rows[k] * row_bytes;
    rows += recv_rows[k];
  }
  Shape out_shape = r.shape;
  out_shape[0] = rows;
  Tensor out;
  HVD_RETURN_IF_ERROR(alloc_output(r.dtype, out_shape, &out, c));
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
  e.handle->set_result(e.part, std::move(out));
  e.handle->set_splits(e.part, std::move(recv_rows));
  return Status::OK();
}

Status NcclRunner::reducescatter(const Response& r, TensorEntry& e, const std::string& c) {
  // Rows of dimension 0 are dealt out evenly; the first dim0 % size ranks get one more (as on
  // the CPU).
  const int size = o_.size;
  const int64_t dim0 = r.shape.at(0);
  const int64_t row = num_elements(Shape(r.shape.begin() + 1, r.shape.end()));
  std::vector<int64_t> rows(static_cast<size_t>(size)), counts(static_cast<size_t>(size));
  bool equal = true;
  for (int k = 0; k < size; ++k) {
    rows[static_cast<size_t>(k)] = dim0 / size + (k < dim0 % size ? 1 : 0);
    counts[static_cast<size_t>(k)] = rows[static_cast<size_t>(k)] * row;
    equal = equal && counts[static_cast<size_t>(k)] == counts[0];
  }
  Shape out_shape = r.shape;
  out_shape[0] = rows[static_cast<size_t>(o_.rank)];
  Tensor out;
  HVD_RETURN_IF_ERROR(alloc_output(r.dtype, out_shape, &out, c));
  ncclDataType_t t;
  HVD_RETURN_IF_ERROR(nccl_type(r.dtype, &t, ctx(c)));
  const bool fp = is_float(r.dtype);
  const ncclRedOp_t op = nccl_op(r.dtype, r.reduce_op, /*avg_ok=*/true);
  const size_t esize = dtype_size(r.dtype);
  const int64_t total = num_elements(r.shape);
  const void* in = e.input.data;
  if (fp && r.prescale != 1.0 && total > 0) {  // the input is not modified: prescale a copy
    HVD_RETURN_IF_ERROR(ensure(&scratch_, &scratch_cap_, static_cast<size_t>(total) * esize, c));
    cuda::CopyItem item{e.input.data, scratch_, total};
    HVD_KERNEL_CHECK(cuda::batched_copy_scale(&item, 1, r.dtype, r.prescale, stream_), ctx(c));
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
    if (fp && r.postscale != 1.0) {
      HVD_KERNEL_CHECK(cuda::scale_in_place(out.data(), mine, r.dtype, r.postscale, stream_), ctx(c));
    } else if (r.reduce_op == ReduceOp::kAverage && !fp) {
      HVD_KERNEL_CHECK(cuda::divide_integers(out.data(), mine, r.dtype, size, stream_), ctx(c));
    }
  }
  e.handle->set_result(e.part, std::move(out));
  return Status::OK();
}

// ---- completion ----------------------------------------------------------------------------

// Polls the oldest batch's event (the stream runs batches in order), watching its
// communicators for asynchronous errors and the timeout, and completes the handles.
void NcclRunner::finalizer_loop() {
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
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      lk.lock();
      continue;
    }
    (void)cudaEventDestroy(p.event);
    (void)cudaGetLastError();
    for (auto& e : p.entries) e.handle->complete(outcome);
    lk.lock();
    queue_.pop_front();
    cv_.notify_all();
  }
}

void NcclRunner::drain() {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [this] { return queue_.empty(); });
}

NcclRunner::~NcclRunner() {
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
  if (hier_ev_) (void)cudaEventDestroy(hier_ev_);
  if (stream_) (void)cudaStreamDestroy(stream_);
  (void)cudaGetLastError();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    if (local_mpi_ != MPI_COMM_NULL) MPI_Comm_free(&local_mpi_);
    if (cross_mpi_ != MPI_COMM_NULL) MPI_Comm_free(&cross_mpi_);
  }
}

}  // namespace

std::unique_ptr<DeviceRunner> make_nccl_runner(const NcclRunnerOptions& options) {
  return std::make_unique<NcclRunner>(options);
}

}  // namespace hvd
