// Copyright horovod_cpp authors.
#include "transport/shm/shm_control_plane.h"

#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <new>

#include "transport/backoff.h"
#include "transport/shm/peer_watch.h"
#include "transport/shm/shm_segment.h"
#include "transport/shm/shm_setup.h"
#include "common/logging.h"

namespace hvd {
namespace {

constexpr size_t kLine = 64;
constexpr auto kNegotiationDeadline = std::chrono::seconds(600);

class ShmControlPlane : public ControlPlane {
 public:
  ShmControlPlane(std::unique_ptr<ControlPlane> fallback, unsigned char* map, size_t map_bytes,
                  size_t slot_bytes, size_t max_words, bool yield_core, PeerWatch watch)
      : fallback_(std::move(fallback)),
        rank_(fallback_->rank()),
        size_(fallback_->size()),
        map_(map),
        map_bytes_(map_bytes),
        slot_bytes_(slot_bytes),
        max_words_(max_words),
        yield_core_(yield_core),
        watch_(std::move(watch)) {}
  ~ShmControlPlane() override { munmap(map_, map_bytes_); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status allreduce_and(std::vector<uint64_t>* words) override;
  Status gather(const std::string& mine, std::vector<std::string>* all) override {
    return fallback_->gather(mine, all);
  }
  Status broadcast(std::string* blob) override { return fallback_->broadcast(blob); }

 private:
  std::atomic<uint64_t>& round_of(int r) const {
    return *reinterpret_cast<std::atomic<uint64_t>*>(map_ + static_cast<size_t>(r) * slot_bytes_);
  }
  uint64_t* buffer(int r, uint64_t round) const {
    return reinterpret_cast<uint64_t*>(map_ + static_cast<size_t>(r) * slot_bytes_ + kLine +
                                       (round % 2) * max_words_ * sizeof(uint64_t));
  }
  Status wait_round(int r, uint64_t round) const;

  std::unique_ptr<ControlPlane> fallback_;
  const int rank_, size_;
  unsigned char* map_;
  const size_t map_bytes_, slot_bytes_, max_words_;
  const bool yield_core_;
  const PeerWatch watch_;
  uint64_t round_ = 0;  // rounds done through shared memory (the same on every rank)
};

Status ShmControlPlane::allreduce_and(std::vector<uint64_t>* words) {
  const size_t n = words->size();
  if (n > max_words_) return fallback_->allreduce_and(words);
  const uint64_t s = ++round_;
  uint64_t* v = words->data();
  std::memcpy(buffer(rank_, s), v, n * sizeof(uint64_t));
  round_of(rank_).store(s, std::memory_order_release);
  for (int k = 1; k < size_; ++k) {
    const int r = (rank_ + k) % size_;
    HVD_RETURN_IF_ERROR(wait_round(r, s));
    const uint64_t* theirs = buffer(r, s);
    for (size_t i = 0; i < n; ++i) v[i] &= theirs[i];
  }
  return Status::OK();
}

// Waits until rank r has published round `round`. As mpi_wait() does for the MPI plane: a
// short spin (peers usually arrive within microseconds; it yields the core every 16 polls
// only when ranks outnumber cores), then sleeps with a growing back-off (at most 200 us).
// The deadline is far beyond any live peer's lateness (a peer busy computing its next step
// still cycles on its idle heartbeat, at most 32 cycle times apart), so it only turns a peer
// that stopped negotiating without dying, or a segment overwritten from outside, into an
// error instead of a hang. A peer that died is caught sooner: a wait that lasts checks every
// ~50 ms that the peer still runs (PeerWatch). The deadline is not capped by the Gloo op
// timeout: a live peer may spend longer than that computing its next step (a heartbeat
// delayed on a loaded host), and that must not fail the job.
Status ShmControlPlane::wait_round(int r, uint64_t round) const {
  const std::atomic<uint64_t>& c = round_of(r);
  if (c.load(std::memory_order_acquire) >= round) return Status::OK();
  Backoff wait(std::chrono::microseconds(50), yield_core_ ? 15u : 63u, yield_core_);
  while (c.load(std::memory_order_acquire) < round) {
    wait.pause();
    if (wait.watch_due()) HVD_RETURN_IF_ERROR(watch_.check("the shared-memory negotiation"));
    if (wait.elapsed() > kNegotiationDeadline) {
      return Status::Backend(
          "shared-memory negotiation: rank " + std::to_string(r) + " did not arrive within " +
          std::to_string(static_cast<long long>(kNegotiationDeadline.count())) + " s");
    }
  }
  return Status::OK();
}

// Rank 0 creates and reserves the segment of `size` slots and starts every slot's round
// counter at 0 (rounds count from 1), the others map it; the name goes once every rank has.
// Null (on every rank) when any rank failed.
unsigned char* map_segment(Bootstrap& group, int rank, int size, size_t slot, const std::string& name,
                           std::string* why_not) {
  const size_t bytes = slot * static_cast<size_t>(size);
  void* p = nullptr;
  std::string error;
  if (rank == 0) {
    Status s = create_segment(name, bytes, "", &p);
    if (s.ok()) {
      unsigned char* base = static_cast<unsigned char*>(p);
      for (int r = 0; r < size; ++r) {
        new (base + static_cast<size_t>(r) * slot) std::atomic<uint64_t>(0);
      }
    } else {
      error = s.message();
    }
  }
  const bool named = rank == 0 && error.empty();  // the name exists and must go
  const bool created = all_agree(group, error.empty());
  if (created && rank != 0) {
    Status s = open_segment(name, bytes, &p);
    if (!s.ok()) error = s.message();
  }
  const bool mapped = created && all_agree(group, error.empty());
  if (named) shm_unlink(name.c_str());  // every rank has mapped it, or none will
  if (!mapped) {
    if (p) munmap(p, bytes);
    *why_not = !error.empty() ? error : "another rank could not map the negotiation segment";
    return nullptr;
  }
  return static_cast<unsigned char*>(p);
}

}  // namespace

std::unique_ptr<ControlPlane> make_shm_control_plane(Bootstrap& group, int set_id, int host,
                                                     size_t max_words, bool yield_core,
                                                     std::unique_ptr<ControlPlane> fallback,
                                                     ErrorCode lost_code) {
  std::string why_not, tag;
  if (!on_one_host(group, host, &why_not) || !segment_tag(group, set_id, &tag, &why_not)) {
    HVD_LOG(kDebug) << "process set " << set_id << ": negotiation over MPI: " << why_not;
    return fallback;
  }
  const int rank = fallback->rank(), size = fallback->size();
  max_words = std::max<size_t>(max_words, 1);
  const size_t slot = kLine + (2 * max_words * sizeof(uint64_t) + kLine - 1) / kLine * kLine;
  const size_t bytes = slot * static_cast<size_t>(size);
  unsigned char* map = map_segment(group, rank, size, slot, "/hvdcpp." + tag + ".ctl", &why_not);
  if (!map) {
    HVD_LOG(kWarning) << "process set " << set_id << ": negotiation over MPI: " << why_not;
    return fallback;
  }
  PeerWatch watch;
  if (!watch.setup(group, set_id)) {
    munmap(map, bytes);
    HVD_LOG(kWarning) << "process set " << set_id << ": negotiation over MPI: exchanging the "
                      << "ranks' process ids failed";
    return fallback;
  }
  watch.set_lost_code(lost_code);
  return std::make_unique<ShmControlPlane>(std::move(fallback), map, bytes, slot, max_words,
                                           yield_core, std::move(watch));
}

}  // namespace hvd
