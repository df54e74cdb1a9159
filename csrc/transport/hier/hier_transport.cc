// Copyright horovod_cpp authors.
#include "transport/hier/hier_transport.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "transport/cpu/cpu_transport.h"
#include "transport/shm/shm_allreduce.h"
#include "transport/shm/shm_setup.h"
#include "common/logging.h"

namespace hvd {
namespace {

class HierDataPlane : public DataPlane {
 public:
  /// `who[l][c]`: the set rank of local rank l on the host of cross rank c (the hosts may be
  /// numbered differently for each local rank when ranks interleave across hosts).
  /// `host_group`/`cross_group`: this rank's host and the ranks of its local rank on every
  /// host (kept for the data planes made over them); `cross`, `set`: the data planes over
  /// `cross_group` and over the whole set.
  HierDataPlane(std::unique_ptr<ShmAllreduce> host, std::unique_ptr<Bootstrap> host_group,
                std::unique_ptr<Bootstrap> cross_group, std::unique_ptr<DataPlane> cross,
                std::unique_ptr<DataPlane> set, std::vector<std::vector<int>> who)
      : host_(std::move(host)),
        host_group_(std::move(host_group)),
        cross_group_(std::move(cross_group)),
        local_rank_(host_group_->rank()),
        local_size_(host_group_->size()),
        who_(std::move(who)),
        cross_(std::move(cross)),
        set_(std::move(set)) {
    for (int l = 0; l < local_size_; ++l) {
      for (size_t c = 0; c < who_[static_cast<size_t>(l)].size(); ++c) {
        const int r = who_[static_cast<size_t>(l)][c];
        if (static_cast<int>(place_.size()) <= r) place_.resize(static_cast<size_t>(r) + 1);
        place_[static_cast<size_t>(r)] = {l, static_cast<int>(c)};
      }
    }
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
    if (mine > 0) HVD_RETURN_IF_ERROR(left_if(cross_->allreduce(share_.data(), mine, dtype, op)));
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
    HVD_RETURN_IF_ERROR(left_if(cross_->allgatherv(in, share_.data(), cross_bytes)));
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
    return set_->alltoallv(in, send, out, recv);
  }
  Status reducescatter(const void* in, void* out, const std::vector<int64_t>& counts,
                       DataType dtype, ReduceOp op) override {
    return set_->reducescatter(in, out, counts, dtype, op);
  }
  // The root's local rank on every host gets it over the network, then each host from it.
  Status broadcast(void* buf, int64_t bytes, int root) override {
    const Place p = place_[static_cast<size_t>(root)];
    if (local_rank_ == p.local) HVD_RETURN_IF_ERROR(left_if(cross_->broadcast(buf, bytes, p.cross)));
    return host_->broadcast(buf, bytes, p.local);
  }
  Status barrier() override { return set_->barrier(); }

 private:
  /// `s`, after marking this rank gone from the host's shared memory when it is an error: a
  /// cross-host step that failed here (a lost host, say) may have succeeded for a host peer,
  /// which then waits for this rank in the next shared-memory step (ShmAllreduce::leave()).
  Status left_if(Status s) {
    if (!s.ok()) host_->leave();
    return s;
  }

  std::unique_ptr<ShmAllreduce> host_;  // the ranks of this host
  std::unique_ptr<Bootstrap> host_group_;
  std::unique_ptr<Bootstrap> cross_group_;  // this local rank on every host
  int local_rank_, local_size_;
  struct Place {
    int local = 0, cross = 0;
  };
  std::vector<std::vector<int>> who_;   // [local rank][cross rank] -> set rank
  std::vector<Place> place_;            // set rank -> (local rank, cross rank)
  // Declared after the groups: destroyed before them (they use the groups' resources).
  std::unique_ptr<DataPlane> cross_;    // over cross_group_
  std::unique_ptr<DataPlane> set_;      // over the whole set
  std::vector<unsigned char> share_;    // this rank's block between the steps
  std::vector<unsigned char> gathered_; // allgather: every block, by local rank then host
};

}  // namespace

std::unique_ptr<Transport> make_hier_transport(const TransportContext& ctx) {
  const Config& config = *ctx.config;
  if (!config.shm_enabled || !config.shm_hierarchical || ctx.layout.size < 4) return nullptr;
  Bootstrap& set = *ctx.bootstrap;
  const int rank = ctx.layout.rank, size = ctx.layout.size;
  std::unique_ptr<Bootstrap> host, cross;
  const bool ok = split_by_host(set, test_host(ctx), &host).ok();
  const int local_rank = ok ? host->rank() : 0, local_size = ok ? host->size() : 0;
  // The fewest and the most of the set's ranks on one host (0 where a rank failed).
  std::vector<int> sizes(static_cast<size_t>(size), 0);
  if (!set.allgather(&local_size, sizeof(int), sizes.data()).ok()) {
    sizes.assign(sizes.size(), 0);  // unusable group: every later exchange reports it
  }
  const int fewest = *std::min_element(sizes.begin(), sizes.end());
  const int most = *std::max_element(sizes.begin(), sizes.end());
  std::string why;
  if (fewest == 0) {
    why = "a rank could not find its host's ranks";
  } else if (fewest == size) {
    return nullptr;  // one host: the shm transport's case
  } else if (fewest != most) {
    why = "hosts hold different numbers of the set's ranks (" + std::to_string(fewest) + " to " +
          std::to_string(most) + ")";
  } else if (fewest < 2) {
    why = "one rank of the set per host";
  } else {
    const Status s = set.split(local_rank, rank, &cross);
    if (!all_agree(set, s.ok())) {
      why = s.ok() ? "splitting the ranks of equal local rank failed on another rank"
                   : s.message();
    }
  }
  std::unique_ptr<ShmAllreduce> shm;
  if (why.empty()) {
    // Agreed within each host by make_shm_allreduce, across hosts here.
    shm = make_shm_allreduce(*host, ctx.set_id, config.shm_chunk_bytes,
                             config.shm_single_copy_bytes > 0 ? config.shm_single_copy_bytes : -1,
                             config.shm_single_copy_max_bytes, 0, 0, &why);
    if (!all_agree(set, shm != nullptr)) {
      if (shm) why = "shared memory failed on another host";
      shm.reset();
    }
    if (shm) shm->peer_watch().set_lost_code(ctx.lost_peer_code);
  }
  if (!shm) {
    HVD_LOG(kInfo) << "process set " << ctx.set_id << ": no hierarchical CPU collectives (" << why
                   << "); CPU collectives use MPI";
    return nullptr;
  }
  // Where every rank of the set is: (local rank, cross rank), from every rank; and the data
  // planes over the cross group and the whole set.
  const int here[2] = {local_rank, cross->rank()};
  std::vector<int> places(static_cast<size_t>(2 * size));
  std::unique_ptr<DataPlane> cross_plane, set_plane;
  Status s = set.allgather(here, sizeof(here), places.data());
  if (s.ok()) s = cross->make_data_plane(&cross_plane);
  if (s.ok()) s = set.make_data_plane(&set_plane);
  if (!all_agree(set, s.ok())) {
    HVD_LOG(kInfo) << "process set " << ctx.set_id << ": no hierarchical CPU collectives ("
                   << (s.ok() ? "the setup failed on another rank" : s.message()) << ")";
    return nullptr;
  }
  std::vector<std::vector<int>> who(static_cast<size_t>(local_size),
                                    std::vector<int>(static_cast<size_t>(size / local_size)));
  for (int r = 0; r < size; ++r) {
    who[static_cast<size_t>(places[2 * r])][static_cast<size_t>(places[2 * r + 1])] = r;
  }
  shm->set_yield_core(ctx.cores_shared);
  HVD_LOG(kDebug) << "process set " << ctx.set_id << ": hierarchical CPU collectives, "
                  << size / local_size << " hosts x " << local_size << " ranks";
  return std::make_unique<CpuTransport>(
      std::make_unique<HierDataPlane>(std::move(shm), std::move(host), std::move(cross),
                                      std::move(cross_plane), std::move(set_plane),
                                      std::move(who)),
      ctx.layout);
}

}  // namespace hvd
