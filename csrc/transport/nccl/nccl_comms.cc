// Copyright horovod_cpp authors. The NCCL transport's communicators (see nccl_internal.h):
// made on first use over the set's Bootstrap, checked for agreement, settled
// (non-blocking communicators), aborted on errors and timeouts.
#include <unistd.h>

#include <cstring>

#include "transport/nccl/gpu_device.h"
#include "transport/nccl/nccl_internal.h"
#include "common/fatal.h"
#include "common/logging.h"

namespace hvd {
namespace nccl {

void abort_locked(Comm& c, const std::string& why) {
  if (c.broken) return;
  c.broken = true;
  c.why = why;
  if (c.comm) {
    HVD_LOG(kError) << "aborting NCCL communicator: " << why;
    // The peers may be waiting in the aborted work: the job ends (common/fatal.h).
    report_fatal("NCCL communicator aborted: " + why);
    const ncclResult_t r = ncclCommAbort(c.comm);
    if (r != ncclSuccess) {
      HVD_LOG(kError) << "ncclCommAbort failed: " << ncclGetErrorString(r);
    }
    c.comm = nullptr;
  }
}

// ---- setup ---------------------------------------------------------------------------------

Status NcclTransport::setup(const std::string& c) {
  if (device_ < 0) {
    device_ = chosen_cuda_device(o_.config, o_.local_rank);
  }
  HVD_CUDA_CHECK(cudaSetDevice(device_), ctx(c));
  if (!stream_) {
    HVD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), ctx(c));
    HVD_CUDA_CHECK(cudaEventCreateWithFlags(&producer_ev_, cudaEventDisableTiming), ctx(c));
    HVD_CUDA_CHECK(cudaEventCreateWithFlags(&host_ev_, cudaEventDisableTiming), ctx(c));
  }
  if (!agreed_) {
    HVD_RETURN_IF_ERROR(check_agreement(c));
    agreed_ = true;
  }
  auto it = comms_.find(device_);
  if (it == comms_.end()) {
    std::shared_ptr<Comm> comm;
    HVD_RETURN_IF_ERROR(make_comm(*o_.bootstrap, c, &comm));
    it = comms_.emplace(device_, std::move(comm)).first;
  }
  comm_ = it->second;
  return Status::OK();
}

// Every member checks, before its first communicator, that no two members of the set on one
// host use the same GPU (NCCL before 2.30 refuses that, or hangs) and that
// HOROVOD_HIERARCHICAL_ALLREDUCE agrees (otherwise ranks would issue different NCCL calls).
Status NcclTransport::check_agreement(const std::string& c) {
  struct Info {
    char host[64];
    int device;
    int hierarchical;
    int may_share;  // this rank accepts sharing its GPU (NCCL >= 2.30 and asked for)
  };
  Info mine{};
  if (gethostname(mine.host, sizeof(mine.host) - 1) != 0) std::strcpy(mine.host, "?");
  mine.device = device_;
  mine.hierarchical = o_.config.hierarchical_allreduce ? 1 : 0;
  int nccl_version = 0;
  if (ncclGetVersion(&nccl_version) != ncclSuccess) nccl_version = 0;
  const bool nccl_can_share = nccl_version >= 23000;  // NCCL 2.30: NCCL_MULTI_RANK_GPU_ENABLE
  mine.may_share =
      nccl_can_share && (o_.config.nccl_multi_rank_gpu || o_.config.cuda_device >= 0) ? 1 : 0;
  std::vector<Info> all(static_cast<size_t>(o_.size));
  Status s = o_.bootstrap->allgather(&mine, sizeof(Info), all.data());
  if (!s.ok()) return Status(s.code(), ctx(c) + ": " + s.message());
  std::string shared;  // the first pair of ranks sharing a GPU, for the warning
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
      if (a.device != b.device || std::strncmp(a.host, b.host, sizeof(a.host)) != 0) continue;
      const std::string pair = "ranks " + std::to_string(o_.global_ranks[static_cast<size_t>(q)]) +
                               " and " + std::to_string(o_.global_ranks[static_cast<size_t>(r)]) +
                               " both use cuda:" + std::to_string(a.device) + " on host " + a.host;
      if (!a.may_share || !b.may_share) {
        return Status::InvalidArgument(
            ctx(c) + ": " + pair +
            "; NCCL runs several ranks on one GPU only from version 2.30 and with "
            "NCCL_MULTI_RANK_GPU_ENABLE=1 (or a device chosen by HOROVOD_CPP_CUDA_DEVICE) on each "
            "of them (this rank: NCCL " + std::to_string(nccl_version) +
            "): start at most one rank per GPU");
      }
      if (shared.empty()) shared = pair;
    }
  }
  if (!shared.empty()) {
    // NCCL reads its variable when a communicator is made; a device chosen explicitly implies it.
    if (!o_.config.nccl_multi_rank_gpu) setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", 0);
    if (o_.rank == 0) {
      HVD_LOG(kWarning) << "horovod_cpp: " << shared
                        << ": several ranks share a GPU (NCCL_MULTI_RANK_GPU_ENABLE); for testing "
                           "only, the GPU is time-sliced";
    }
  }
  return Status::OK();
}

// Makes a communicator of the members of `over` (collective over it): `over`'s rank 0 makes
// the unique id and broadcasts it. Non-blocking NCCL communicators, so
// that no NCCL call can block this thread for longer than the timeout.
Status NcclTransport::make_comm(Bootstrap& over, const std::string& c,
                                std::shared_ptr<Comm>* out) {
  const int rank = over.rank(), size = over.size();
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
  Status s = over.broadcast(&ok, sizeof(ok), 0);
  if (!s.ok()) return Status(s.code(), ctx(c) + ": " + s.message());
  if (!ok) {
    return Status::Backend(rank == 0 ? err : ctx(c) + ": ncclGetUniqueId failed on rank 0 of the set");
  }
  s = over.broadcast(&id, sizeof(id), 0);
  if (!s.ok()) return Status(s.code(), ctx(c) + ": " + s.message());
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
Status NcclTransport::settle(Comm& comm, const std::string& c) {
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

Status NcclTransport::nccl_group(Comm& comm, const std::string& c, const std::function<Status()>& issue) {
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

}  // namespace nccl
}  // namespace hvd
