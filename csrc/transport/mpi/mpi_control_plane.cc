// Copyright horovod_cpp authors.
#include "transport/mpi/mpi_control_plane.h"

#include <algorithm>
#include <string>

#include "transport/mpi/mpi_context.h"
#include "transport/mpi/mpi_wait.h"

namespace hvd {

// Every cycle runs this once, so it is point to point rather than MPI_Iallreduce: Open MPI's
// nonblocking collectives build a schedule per call, and on two ranks of one host that cost
// 1.8 us per negotiation against 0.5 us for one Isend/Irecv pair (bench of both, medians).
// Recursive doubling over the largest power of two p <= size; ranks p..size-1 first hand
// their words to rank - p and get the result back from it at the end.
Status MpiControlPlane::allreduce_and(std::vector<uint64_t>* words) {
  if (size_ == 1) return Status::OK();
  const int n = static_cast<int>(words->size());
  peer_words_.resize(words->size());
  uint64_t* mine = words->data();
  uint64_t* theirs = peer_words_.data();
  const char* what = "coordination bit vector exchange";
  auto exchange = [&](int peer) {  // sends mine, receives theirs
    MPI_Request req[2];
    HVD_MPI_CHECK(MPI_Irecv(theirs, n, MPI_UINT64_T, peer, kAndTag, comm_, &req[0]));
    HVD_MPI_CHECK(MPI_Isend(mine, n, MPI_UINT64_T, peer, kAndTag, comm_, &req[1]));
    return mpi_wait_all(req, 2, what, yield_core_);
  };
  // mine &= theirs, by MPI: the received words were written by whichever thread progressed
  // the receive (inside Open MPI, with synchronization ThreadSanitizer cannot see), so they
  // are read where MPI's own accesses are (the TSan run suppresses those, and MPI's
  // completion orders them).
  auto fold = [&]() -> Status {
    HVD_MPI_CHECK(MPI_Reduce_local(theirs, mine, n, MPI_UINT64_T, MPI_BAND));
    return Status::OK();
  };
  int p = 1;
  while (p * 2 <= size_) p *= 2;
  if (rank_ >= p) {  // an extra rank: its partner does the work, and sends the result
    HVD_RETURN_IF_ERROR(exchange(rank_ - p));
    std::fill(mine, mine + n, ~0ull);  // all ones AND theirs = theirs
    return fold();
  }
  const bool has_extra = rank_ + p < size_;
  if (has_extra) {
    MPI_Request req;
    HVD_MPI_CHECK(MPI_Irecv(theirs, n, MPI_UINT64_T, rank_ + p, kAndTag, comm_, &req));
    HVD_RETURN_IF_ERROR(mpi_wait(&req, what, yield_core_));
    HVD_RETURN_IF_ERROR(fold());
  }
  for (int mask = 1; mask < p; mask <<= 1) {
    HVD_RETURN_IF_ERROR(exchange(rank_ ^ mask));
    HVD_RETURN_IF_ERROR(fold());
  }
  if (has_extra) {
    MPI_Request req;
    HVD_MPI_CHECK(MPI_Isend(mine, n, MPI_UINT64_T, rank_ + p, kAndTag, comm_, &req));
    HVD_RETURN_IF_ERROR(mpi_wait(&req, what, yield_core_));
  }
  return Status::OK();
}

Status MpiControlPlane::gather(const std::string& mine, std::vector<std::string>* all) {
  // -1: this rank's own message is too large (every rank learns it below).
  int len = mine.size() > 0x7fffffffULL ? -1 : static_cast<int>(mine.size());
  // Every rank gets every size (not only rank 0), so every rank sees the same total and a
  // too-large one fails everywhere at once instead of leaving the others in the gather.
  std::vector<int> lens(static_cast<size_t>(size_));
  MPI_Request req;
  HVD_MPI_CHECK(MPI_Iallgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm_, &req));
  HVD_RETURN_IF_ERROR(mpi_wait(&req, "MPI_Iallgather (request sizes)", yield_core_));
  std::vector<int> displs(static_cast<size_t>(size_));
  long long total = 0;
  for (int r = 0; r < size_; ++r) {
    if (lens[static_cast<size_t>(r)] < 0) {
      return Status::Backend("the negotiation message of rank " + std::to_string(r) +
                             " is over the 2 GiB an MPI gather can carry");
    }
    displs[static_cast<size_t>(r)] = static_cast<int>(std::min(total, 0x7fffffffLL));
    total += lens[static_cast<size_t>(r)];
  }
  if (total > 0x7fffffffLL) {
    return Status::Backend("the negotiation messages of this cycle total " + std::to_string(total) +
                           " bytes, over the 2 GiB an MPI gather can carry");
  }
  std::string buf;
  if (rank_ == 0) buf.resize(static_cast<size_t>(total));
  HVD_MPI_CHECK(MPI_Igatherv(mine.data(), len, MPI_BYTE, rank_ == 0 ? &buf[0] : nullptr,
                             lens.data(), displs.data(), MPI_BYTE, 0, comm_, &req));
  HVD_RETURN_IF_ERROR(mpi_wait(&req, "MPI_Igatherv (requests)", yield_core_));
  if (rank_ == 0) {
    all->resize(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) {
      (*all)[static_cast<size_t>(r)] =
          buf.substr(static_cast<size_t>(displs[static_cast<size_t>(r)]),
                     static_cast<size_t>(lens[static_cast<size_t>(r)]));
    }
  }
  return Status::OK();
}

Status MpiControlPlane::broadcast(std::string* blob) {
  long long len = static_cast<long long>(blob->size());
  MPI_Request req;
  HVD_MPI_CHECK(MPI_Ibcast(&len, 1, MPI_LONG_LONG, 0, comm_, &req));
  HVD_RETURN_IF_ERROR(mpi_wait(&req, "MPI_Ibcast (response size)", yield_core_));
  if (len > 0x7fffffffLL) return Status::Backend("negotiation message over 2 GiB");
  blob->resize(static_cast<size_t>(len));
  if (len == 0) return Status::OK();
  HVD_MPI_CHECK(MPI_Ibcast(&(*blob)[0], static_cast<int>(len), MPI_BYTE, 0, comm_, &req));
  return mpi_wait(&req, "MPI_Ibcast (responses)", yield_core_);
}

}  // namespace hvd
