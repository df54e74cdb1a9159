// Copyright horovod_cpp authors.
#include "transport/hier/hier_transport.h"

#include <cstring>
#include <string>
#include <vector>

#include "transport/cpu/cpu_transport.h"
#include "transport/mpi/mpi_data_plane.h"
#include "transport/shm/shm_allreduce.h"
#include "transport/shm/shm_setup.h"
#include "common/logging.h"

namespace hvd {
namespace {

// Frees a communicator made here (null handles are left alone).
void free_comm(MPI_Comm* c) {
  if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

class HierDataPlane : public DataPlane {
 public:
  /// `who[l][c]`: the set rank of local rank l on the host of cross rank c (the hosts may be
  /// numbered differently for each local rank when ranks interleave across hosts).
  HierDataPlane(std::unique_ptr<ShmAllreduce> host, MPI_Comm host_comm, int local_rank,
                int local_size, MPI_Comm cross_comm, std::vector<std::vector<int>> who,
                const TransportContext& ctx)
      : host_(std::move(host)),
        host_comm_(host_comm),
        cross_comm_(cross_comm),
        local_rank_(local_rank),
        local_size_(local_size),
        who_(std::move(who)),
        cross_(ctx.mpi, cross_comm, ctx.config->reduce_chunk_bytes),
        set_(ctx.mpi, ctx.data_comm, ctx.config->reduce_chunk_bytes) {
    for (int l = 0; l < local_size_; ++l) {
      for (size_t c = 0; c < who_[static_cast<size_t>(l)].size(); ++c) {
        const int r = who_[static_cast<size_t>(l)][c];
        if (static_cast<int>(place_.size()) <= r) place_.resize(static_cast<size_t>(r) + 1);
        place_[static_cast<size_t>(r)] = {l, static_cast<int>(c)};
      }
    }
  }
  ~HierDataPlane() override {
    free_comm(&cross_comm_);
    free_comm(&host_comm_);
  }
  const char* name() const override { return "hier"; }
  bool failures_are_fatal() const override { return true; }  // MPI is part of every step

  Status allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op) override {
    const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
    // Local rank l owns block l: the same split on every host.
    std::vector<int64_t> counts(static_cast<size_t>(local_size_)), bytes(counts.size());
    for (int l = 0; l < local_size_; ++l) {
      counts[static_cast<size_t>(l)] = count / local_size_ + (l < count % local_size_ ? 1 : 0);
      bytes[static_cast<size_t>(l)] = counts[static_cast<size_t>(l)] * esize;
    }
    const int64_t mine = counts[static_cast<size_t>(local_rank_)];
    if (static_cast<int64_t>(share_.size()) < mine * esize) share_.resize(static_cast<size_t>(mine * esize));
    // Average reduces as Sum here: the caller finishes (divides, scales) the whole result.
    HVD_RETURN_IF_ERROR(host_->reducescatter(buf, share_.data(), counts, dtype, op, 1.0, 1.0, 1));
    if (mine > 0) HVD_RETURN_IF_ERROR(cross_.allreduce(share_.data(), mine, dtype, op));
    return host_->allgatherv(share_.data(), buf, bytes);
  }
  // Blocks of the ranks of equal local rank over the network (one exchange per local rank,
  // side by side), then the host's gathered blocks through shared memory, then into rank
  // order.
  Status allgatherv(const void* in, void* out, const std::vector<int64_t>& bytes) override {
    const std::vector<int>& mine = who_[static_cast<size_t>(local_rank_)];
    std::vector<int64_t> cross_bytes(mine.size()), host_bytes(static_cast<size_t>(local_size_), 0);
    for (size_t c = 0; c < mine.size(); ++c) cross_bytes[c] = bytes[static_cast<size_t>(mine[c])];
    int64_t total = 0;
    for (int l = 0; l < local_size_; ++l) {
      for (int r : who_[static_cast<size_t>(l)]) host_bytes[static_cast<size_t>(l)] += bytes[static_cast<size_t>(r)];
      total += host_bytes[static_cast<size_t>(l)];
    }
    if (static_cast<int64_t>(share_.size()) < host_bytes[static_cast<size_t>(local_rank_)]) {
      share_.resize(static_cast<size_t>(host_bytes[static_cast<size_t>(local_rank_)]));
    }
    if (static_cast<int64_t>(gathered_.size()) < total) gathered_.resize(static_cast<size_t>(total));
    HVD_RETURN_IF_ERROR(cross_.allgatherv(in, share_.data(), cross_bytes));
    HVD_RETURN_IF_ERROR(host_->allgatherv(share_.data(), gathered_.data(), host_bytes));
    std::vector<int64_t> at(bytes.size(), 0);  // where each rank's block goes in `out`
    for (size_t r = 1; r < bytes.size(); ++r) at[r] = at[r - 1] + bytes[r - 1];
    const unsigned char* src = gathered_.data();
    for (int l = 0; l < local_size_; ++l) {
      for (int r : who_[static_cast<size_t>(l)]) {
        const size_t n = static_cast<size_t>(bytes[static_cast<size_t>(r)]);
        if (n) std::memcpy(static_cast<unsigned char*>(out) + at[static_cast<size_t>(r)], src, n);
        src += n;
      }
    }
    return Status::OK();
  }
  Status alltoallv(const void* in, const std::vector<int64_t>& send, void* out,
                   const std::vector<int64_t>& recv) override {
    return set_.alltoallv(in, send, out, recv);
  }
  Status reducescatter(const void* in, void* out, const std::vector<int64_t>& counts,
                       DataType dtype, ReduceOp op) override {
    return set_.reducescatter(in, out, counts, dtype, op);
  }
  // The root's local rank on every host gets it over the network, then each host from it.
  Status broadcast(void* buf, int64_t bytes, int root) override {
    const Place p = place_[static_cast<size_t>(root)];
    if (local_rank_ == p.local) HVD_RETURN_IF_ERROR(cross_.broadcast(buf, bytes, p.cross));
    return host_->broadcast(buf, bytes, p.local);
  }
  Status barrier() override { return set_.barrier(); }

 private:
  std::unique_ptr<ShmAllreduce> host_;  // the ranks of this host
  MPI_Comm host_comm_;
  MPI_Comm cross_comm_;                 // this local rank on every host
  int local_rank_, local_size_;
  struct Place {
    int local = 0, cross = 0;
  };
  std::vector<std::vector<int>> who_;   // [local rank][cross rank] -> set rank
  std::vector<Place> place_;            // set rank -> (local rank, cross rank)
  MpiDataPlane cross_;                  // over cross_comm_
  MpiDataPlane set_;                    // over the set's data communicator
  std::vector<unsigned char> share_;    // this rank's block between the steps
  std::vector<unsigned char> gathered_; // allgather: every block, by local rank then host
};

// True on every rank of `comm` iff `ok` on every rank.
bool everyone(MPI_Comm comm, bool ok) {
  int mine = ok ? 1 : 0, all = 0;
  if (MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS) return false;
  return all == 1;
}

}  // namespace

std::unique_ptr<Transport> make_hier_transport(const TransportContext& ctx) {
  const Config& config = *ctx.config;
  if (!config.shm_enabled || !config.shm_hierarchical || ctx.layout.size < 4) return nullptr;
  const int rank = ctx.layout.rank, size = ctx.layout.size;
  MPI_Comm host = MPI_COMM_NULL, cross = MPI_COMM_NULL;
  int local_rank = 0, local_size = 0;
  bool ok = split_by_host(ctx.data_comm, test_host(ctx), &host) == MPI_SUCCESS &&
            MPI_Comm_rank(host, &local_rank) == MPI_SUCCESS &&
            MPI_Comm_size(host, &local_size) == MPI_SUCCESS;
  // The fewest and the most of the set's ranks on one host (0 where a rank failed).
  int mine[2] = {ok ? local_size : 0, ok ? -local_size : 0}, agreed[2] = {0, 0};
  if (MPI_Allreduce(mine, agreed, 2, MPI_INT, MPI_MIN, ctx.data_comm) != MPI_SUCCESS) {
    agreed[0] = 0;  // unusable communicator: MPI's own collectives will report it
  }
  const int fewest = agreed[0], most = -agreed[1];
  std::string why;
  if (fewest == 0) {
    why = "a rank could not find its host's ranks";
  } else if (fewest == size) {
    free_comm(&host);
    return nullptr;  // one host: the shm transport's case
  } else if (fewest != most) {
    why = "hosts hold different numbers of the set's ranks (" + std::to_string(fewest) + " to " +
          std::to_string(most) + ")";
  } else if (fewest < 2) {
    why = "one rank of the set per host";
  } else if (!everyone(ctx.data_comm,
                       MPI_Comm_split(ctx.data_comm, local_rank, rank, &cross) == MPI_SUCCESS)) {
    why = "MPI_Comm_split (the ranks of equal local rank) failed";
  }
  std::unique_ptr<ShmAllreduce> shm;
  if (why.empty()) {
    // Agreed within each host by make_shm_allreduce, across hosts here.
    shm = make_shm_allreduce(host, ctx.set_id, config.shm_chunk_bytes,
                             config.shm_single_copy_bytes > 0 ? config.shm_single_copy_bytes : -1,
                             config.shm_single_copy_max_bytes, 0, 0, &why);
    if (!everyone(ctx.data_comm, shm != nullptr)) {
      if (shm) why = "shared memory failed on another host";
      shm.reset();
    }
  }
  if (!shm) {
    HVD_LOG(kInfo) << "process set " << ctx.set_id << ": no hierarchical CPU collectives (" << why
                   << "); CPU collectives use MPI";
    free_comm(&cross);
    free_comm(&host);
    return nullptr;
  }
  // Where every rank of the set is: (local rank, cross rank), from every rank.
  int here[2] = {local_rank, 0}, cross_rank = 0;
  MPI_Comm_rank(cross, &cross_rank);
  here[1] = cross_rank;
  std::vector<int> places(static_cast<size_t>(2 * size));
  if (!everyone(ctx.data_comm, MPI_Allgather(here, 2, MPI_INT, places.data(), 2, MPI_INT,
                                             ctx.data_comm) == MPI_SUCCESS)) {
    HVD_LOG(kInfo) << "process set " << ctx.set_id
                   << ": no hierarchical CPU collectives (MPI_Allgather of the places failed)";
    free_comm(&cross);
    free_comm(&host);
    return nullptr;
  }
  std::vector<std::vector<int>> who(static_cast<size_t>(local_size),
                                    std::vector<int>(static_cast<size_t>(size / local_size)));
  for (int r = 0; r < size; ++r) {
    who[static_cast<size_t>(places[2 * r])][static_cast<size_t>(places[2 * r + 1])] = r;
  }
  shm->set_yield_core(ctx.mpi->cores_shared());
  HVD_LOG(kDebug) << "process set " << ctx.set_id << ": hierarchical CPU collectives, "
                  << size / local_size << " hosts x " << local_size << " ranks";
  return std::make_unique<CpuTransport>(
      std::make_unique<HierDataPlane>(std::move(shm), host, local_rank, local_size, cross,
                                      std::move(who), ctx),
      ctx.layout);
}

}  // namespace hvd
