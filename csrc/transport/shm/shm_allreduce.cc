// Copyright horovod_cpp authors.
#include "transport/shm/shm_allreduce.h"

#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>

#include "transport/backoff.h"
#include "kernels/host/cpu_ops.h"
#include "transport/shm/shm_segment.h"

namespace hvd {
namespace {

constexpr size_t kHeaderBytes = 4096;
// Far beyond any live peer's lateness inside a collective: a dead peer is caught by PeerWatch
// within ~50 ms instead; the deadline is for a live peer that stopped (or a watch that is off).
// Not capped by the Gloo op timeout: a live peer descheduled on a loaded host must not fail
// the job.
constexpr auto kDeadline = std::chrono::seconds(300);

std::string shm_name(const std::string& tag, int rank) {
  return "/hvdcpp." + tag + "." + std::to_string(rank);
}

// The logical vector made of the caller's segments: visits the pieces of [lo, hi).
class Pieces {
 public:
  /// `starts`: room for the offsets, reused between calls.
  Pieces(const std::vector<Segment>& segs, int64_t esize, std::vector<int64_t>* starts)
      : segs_(segs), esize_(esize), starts_(*starts) {
    starts_.clear();
    starts_.reserve(segs.size() + 1);
    int64_t at = 0;
    for (const auto& s : segs) {
      starts_.push_back(at);
      at += s.count;
    }
    starts_.push_back(at);
  }
  int64_t total() const { return starts_.back(); }

  // fn(pointer into the caller's memory, element count, logical offset of that pointer)
  template <typename Fn>
  void each(int64_t lo, int64_t hi, Fn fn) const {
    // Segments are visited in order; the search starts from the last hit (chunks advance).
    while (cursor_ > 0 && starts_[cursor_] > lo) --cursor_;
    while (cursor_ + 1 < starts_.size() && starts_[cursor_ + 1] <= lo) ++cursor_;
    for (size_t i = cursor_; i < segs_.size() && starts_[i] < hi; ++i) {
      const int64_t a = std::max(lo, starts_[i]);
      const int64_t b = std::min(hi, starts_[i + 1]);
      if (b <= a) continue;
      fn(static_cast<unsigned char*>(segs_[i].data) + (a - starts_[i]) * esize_, b - a, a);
    }
  }

 private:
  const std::vector<Segment>& segs_;
  int64_t esize_;
  std::vector<int64_t>& starts_;
  mutable size_t cursor_ = 0;
};

}  // namespace

// One per rank, at the start of its segment. alignas applies to the array, not to each
// element: the three counters share one cache line. That is intended: only the owning rank
// writes them (peers only read), and each advances once per chunk. The slots start
// kHeaderBytes into the segment, on lines of their own.
struct ShmAllreduce::Header {
  alignas(64) std::atomic<uint64_t> counter[3];  // published, reduced, collected (chunks)
  char pad[64 * 3];
  // Single-copy rounds: the owner's input and its length, valid from its kPublished to the
  // round's end. Peers read only inside [buffer, buffer + buffer_bytes), and only as many
  // bytes as the agreed sizes give them (read_peer()).
  alignas(64) uint64_t buffer;
  int64_t buffer_bytes;
  int64_t pid;      // the owner's process: read once, at attach() (pids_)
  uint64_t self;    // this segment's address in the owner's address space (the probe)
  // The owner's GatherPaths::Costs (doubles, as bits), read by the peers for their votes.
  alignas(64) std::atomic<uint64_t> path_cost[sizeof(GatherPaths::Costs) / sizeof(double)];
  // Non-zero once the owner has left the collectives: kLeftInWake, kLeftClosed or kLeftOnError.
  alignas(64) std::atomic<uint64_t> left;
};


Status ShmAllreduce::create(const std::string& tag, int rank, int size, int64_t chunk_bytes,
                            std::unique_ptr<ShmAllreduce>* out) {
  static_assert(sizeof(Header) <= kHeaderBytes, "the header must fit before the slots");
  std::unique_ptr<ShmAllreduce> s(new ShmAllreduce());
  s->tag_ = tag;
  s->rank_ = rank;
  s->size_ = size;
  s->chunk_bytes_ = chunk_bytes;
  s->map_bytes_ = kHeaderBytes + 2 * static_cast<size_t>(chunk_bytes);
  s->maps_.assign(static_cast<size_t>(size), nullptr);
  // Until the segment exists the name is not ours: a failure (it may exist already, made by
  // someone else) must not make the destructor remove it.
  s->unlinked_ = true;
  const std::string name = shm_name(tag, rank);
  void* p = nullptr;
  HVD_RETURN_IF_ERROR(create_segment(
      name, s->map_bytes_,
      " (/dev/shm is too small: the job needs " + std::to_string(s->map_bytes_) +
          " bytes there per rank; lower HOROVOD_CPP_SHM_CHUNK_BYTES or enlarge /dev/shm)",
      &p));
  Header* h = new (p) Header();
  for (auto& c : h->counter) c.store(0, std::memory_order_relaxed);
  h->left.store(0, std::memory_order_relaxed);
  s->unlinked_ = false;
  h->buffer = 0;
  h->buffer_bytes = 0;
  h->pid = static_cast<int64_t>(getpid());
  h->self = reinterpret_cast<uint64_t>(p);
  s->maps_[static_cast<size_t>(rank)] = static_cast<unsigned char*>(p);
  *out = std::move(s);
  return Status::OK();
}

Status ShmAllreduce::attach() {
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    void* p = nullptr;
    HVD_RETURN_IF_ERROR(open_segment(shm_name(tag_, r), map_bytes_, &p));
    maps_[static_cast<size_t>(r)] = static_cast<unsigned char*>(p);
  }
  // The peers' processes, as each wrote it before the barrier that precedes attach(): from
  // here on a header rewritten by anyone cannot point process_vm_readv at another process.
  pids_.assign(static_cast<size_t>(size_), 0);
  for (int r = 0; r < size_; ++r) {
    pids_[static_cast<size_t>(r)] = r == rank_ ? static_cast<int64_t>(getpid()) : header(r)->pid;
    if (pids_[static_cast<size_t>(r)] <= 0) {
      return Status::Backend("shared memory: rank " + std::to_string(r) +
                             "'s segment names no process");
    }
  }
  return Status::OK();
}

void ShmAllreduce::unlink() {
  if (!unlinked_) shm_unlink(shm_name(tag_, rank_).c_str());
  unlinked_ = true;
}

ShmAllreduce::~ShmAllreduce() {
  if (maps_.size() > static_cast<size_t>(rank_) && maps_[static_cast<size_t>(rank_)]) {
    mark_left(kLeftClosed);
  }
  unlink();
  for (unsigned char* m : maps_) {
    if (m) munmap(m, map_bytes_);
  }
}

ShmAllreduce::Header* ShmAllreduce::header(int rank) const {
  return reinterpret_cast<Header*>(maps_[static_cast<size_t>(rank)]);
}

ShmAllreduce::Round ShmAllreduce::next_round(int64_t bytes) {
  Round r;
  r.s = step_++;
  r.which = static_cast<int>(r.s % 2);
  if (bytes < kRingMinBytes) {  // a few lines: rewritten in place, they stay at hand
    r.at = 0;
    return r;
  }
  int64_t& cursor = cursor_[r.which];
  const int64_t need = (bytes + 63) / 64 * 64;  // rounds start on cache lines of their own
  if (cursor + need > chunk_bytes_) cursor = 0;
  r.at = cursor;
  cursor += need;
  return r;
}

unsigned char* ShmAllreduce::slot(int rank, const Round& r) const {
  return maps_[static_cast<size_t>(rank)] + kHeaderBytes +
         static_cast<size_t>(r.which) * static_cast<size_t>(chunk_bytes_) + static_cast<size_t>(r.at);
}

void ShmAllreduce::signal(int which, uint64_t value) {
  header(rank_)->counter[which].store(value, std::memory_order_release);
}

// Waits until every peer's counter `which` reaches `target`.
Status ShmAllreduce::wait_all(int which, uint64_t target) {
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) HVD_RETURN_IF_ERROR(wait_rank(r, which, target));
  }
  return Status::OK();
}

// Waits until rank r's counter `which` reaches `target`: a spin of up to 1 ms (every rank is
// inside the collective already, so peers are microseconds away, a chunk's copy or reduction
// at most; the spin yields every few polls only when ranks outnumber cores: a yield hands the
// core away for a time slice), then sleeps with a growing back-off (at most 200 us), so a rank
// waiting for a descheduled peer gives up its core; a peer that does not arrive within the
// deadline is an error, never a hang. A wait that lasts checks that the peer still runs
// (PeerWatch): a dead peer fails it at once, long before the deadline.
Status ShmAllreduce::wait_rank(int r, int which, uint64_t target) {
  std::atomic<uint64_t>& c = header(r)->counter[which];
  if (c.load(std::memory_order_acquire) >= target) return Status::OK();
  Backoff wait(std::chrono::milliseconds(1), 63, yield_core_);
  while (c.load(std::memory_order_acquire) < target) {
    wait.pause();
    if (wait.watch_due()) {
      Status s = watch_.check("a shared-memory collective");
      if (s.ok()) s = check_left(r);
      // A peer that arrived and then left (or died) in the meantime arrived: the counter is
      // read again after its mark (stored after the counter, and read here with acquire).
      if (!s.ok() && c.load(std::memory_order_acquire) < target) {
        mark_left(kLeftInWake);  // another rank's failure: this rank leaves in its wake
        return s;
      }
    }
    if (wait.elapsed() > kDeadline) {
      return fail(Status::Backend("shared memory: rank " + std::to_string(r) +
                                  " did not arrive within " +
                                  std::to_string(static_cast<long long>(kDeadline.count())) + " s"));
    }
  }
  return Status::OK();
}

void ShmAllreduce::leave() { mark_left(kLeftOnError); }

void ShmAllreduce::mark_left(uint64_t how) {
  std::atomic<uint64_t>& mark = header(rank_)->left;
  uint64_t was = mark.load(std::memory_order_relaxed);
  while (was < how && !mark.compare_exchange_weak(was, how, std::memory_order_release)) {
  }
}

bool ShmAllreduce::has_left(int r) const {
  return header(r)->left.load(std::memory_order_acquire) != 0;
}

// Every peer, not only `r`: `r` may itself be waiting for the one that left. A rank that left
// on an error of its own is named before one that left in its wake (whose mark may be seen
// first): that one's mark stays, so every waiter names the same cause.
Status ShmAllreduce::check_left(int r) const {
  int who = -1;
  uint64_t why = 0;
  for (int p = 0; p < size_; ++p) {
    const uint64_t mark = p == rank_ ? 0 : header(p)->left.load(std::memory_order_acquire);
    if (mark > why) {
      who = p;
      why = mark;
    }
  }
  if (who < 0) return Status::OK();
  return Status(watch_.lost_code(),
                "process set " + std::to_string(watch_.set_id()) + ": shared memory: rank " +
                    std::to_string(who) + " of this host left the collective " +
                    (why == kLeftOnError  ? "after an error on its side (its log says which)"
                     : why == kLeftClosed ? "and closed its shared memory (it shut down or reset)"
                                          : "when another rank failed") +
                    ", while this rank waited for rank " + std::to_string(r));
}

// A class's two costs (c[kind][band][0..1]) lie at 2 * GatherPaths::bit(kind, band) in the
// flat array, and so in the header: 16 bytes, never across a cache line.
void ShmAllreduce::publish_path_costs(GatherPaths::Kind kind, int64_t bytes) {
  const int band = paths_.band(kind, bytes);
  if (band < 0) return;
  const int bit = GatherPaths::bit(kind, band);
  costs_changed_ |= uint64_t{1} << bit;
  const double* v = paths_.costs().c[kind][band];
  for (int w = 0; w < 2; ++w) {
    uint64_t bits;
    std::memcpy(&bits, &v[w], sizeof(bits));
    // Written only when it changed (a cost is the fastest of recent calls: most calls leave
    // it): an unwritten line stays in the peers' caches, and their next read costs nothing.
    std::atomic<uint64_t>& published = header(rank_)->path_cost[2 * bit + w];
    if (published.load(std::memory_order_relaxed) != bits) {
      published.store(bits, std::memory_order_relaxed);
    }
  }
}

uint64_t ShmAllreduce::path_votes() {
  if (!paths_.enabled()) return 0;
  if (paths_.test_votes()) return paths_.votes(slowest_);  // drawn anew every cycle
  // Counted again only after a timed call, and only for the classes timed since (every rank
  // runs the same calls, so the peers' costs moved then too, in the same classes): a cycle of
  // small collectives pays one test, a cycle after a timed call a class's few costs.
  if (costs_changed_ == 0) return votes_;
  const uint64_t changed = costs_changed_;
  costs_changed_ = 0;
  const double* own = &paths_.costs().c[0][0][0];
  double* slowest = &slowest_.c[0][0][0];
  for (uint64_t m = changed; m != 0; m &= m - 1) {
    const int at = 2 * __builtin_ctzll(m);
    for (int i = at; i < at + 2; ++i) {
      double s = own[i];
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        const uint64_t bits = header(r)->path_cost[i].load(std::memory_order_relaxed);
        double peer;
        std::memcpy(&peer, &bits, sizeof(peer));
        s = GatherPaths::slower(s, peer);
      }
      slowest[i] = s;
    }
  }
  votes_ = paths_.votes(slowest_, changed, votes_);
  return votes_;
}

bool ShmAllreduce::probe_single_copy() const {
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    uint64_t seen = 0;
    if (read_peer_at(r, header(r)->self + offsetof(Header, self), &seen, sizeof(seen)) != 0 ||
        seen != header(r)->self) {
      return false;
    }
  }
  return true;
}

// 0, or the errno of the failed process_vm_readv.
int ShmAllreduce::read_peer_at(int r, uint64_t remote, void* out, int64_t bytes) const {
  unsigned char* dst = static_cast<unsigned char*>(out);
  const pid_t pid = static_cast<pid_t>(pids_[static_cast<size_t>(r)]);
  while (bytes > 0) {
    iovec local{dst, static_cast<size_t>(bytes)};
    iovec theirs{reinterpret_cast<void*>(remote), static_cast<size_t>(bytes)};
    const ssize_t got = process_vm_readv(pid, &local, 1, &theirs, 1, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return got < 0 ? errno : EIO;
    dst += got;
    remote += static_cast<uint64_t>(got);
    bytes -= got;
  }
  return 0;
}

void ShmAllreduce::publish_buffer(const void* buf, int64_t bytes, uint64_t s) {
  header(rank_)->buffer = reinterpret_cast<uint64_t>(buf);
  header(rank_)->buffer_bytes = bytes;
  signal(kPublished, s + 1);  // release: the address is visible with the counter
}

Status ShmAllreduce::read_peer(int r, int64_t offset, void* out, int64_t bytes) {
  // Read once: the bounds checked are the bounds used.
  const uint64_t base = header(r)->buffer;
  const int64_t published = header(r)->buffer_bytes;
  if (offset < 0 || bytes < 0 || published < 0 || offset > published - bytes) {
    return fail(Status::Backend("shared memory: rank " + std::to_string(r) + " published " +
                                std::to_string(published) + " bytes, and this rank was to read " +
                                std::to_string(bytes) + " at " + std::to_string(offset)));
  }
  const int e = read_peer_at(r, base + static_cast<uint64_t>(offset), out, bytes);
  if (e == 0) return Status::OK();
  return fail(Status::Backend("reading " + std::to_string(bytes) + " bytes of rank " +
                              std::to_string(r) + "'s buffer (process_vm_readv): " +
                              std::strerror(e)));
}


Status ShmAllreduce::allreduce_whole(const std::vector<Segment>& segs, DataType dtype,
                                     ReduceOp op, double scale, int64_t divisor) {
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  const Pieces pieces(segs, esize, &starts_);
  const Round rd = next_round(pieces.total() * esize);
  const uint64_t s = rd.s;
  if (s >= 2) HVD_RETURN_IF_ERROR(wait_all(kCollected, s - 1));
  unsigned char* mine = slot(rank_, rd);
  pieces.each(0, pieces.total(), [&](unsigned char* p, int64_t cnt, int64_t off) {
    std::memcpy(mine + off * esize, p, static_cast<size_t>(cnt * esize));
  });
  signal(kPublished, s + 1);
  HVD_RETURN_IF_ERROR(wait_all(kPublished, s + 1));
  // Every rank folds every element in rank order from the slots (its own included), so every
  // rank gets the same bits, and the same as the chunked path's.
  pieces.each(0, pieces.total(), [&](unsigned char* p, int64_t cnt, int64_t off) {
    const int64_t at = off * esize;
    fold_reduction(p, slot(0, rd) + at, slot(1, rd) + at, [&](int j) { return slot(j, rd) + at; },
                   size_, cnt, dtype, op, scale, divisor);
  });
  signal(kReduced, s + 1);
  signal(kCollected, s + 1);  // done reading the peers' slots of this round
  return Status::OK();
}

Status ShmAllreduce::allreduce(const std::vector<Segment>& segs, DataType dtype, ReduceOp op,
                               double scale, int64_t divisor) {
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  const Pieces pieces(segs, esize, &starts_);
  const int64_t total = pieces.total();
  if (total > 0 && total * esize <= std::min(kWholeBytes, chunk_bytes_)) {
    return allreduce_whole(segs, dtype, op, scale, divisor);
  }
  const int64_t chunk = std::max<int64_t>(size_, chunk_bytes_ / esize);
  const int n = size_, me = rank_;
  const bool commutes = op == ReduceOp::kSum || op == ReduceOp::kAverage || op == ReduceOp::kProduct;

  for (int64_t base = 0; base < total; base += chunk) {
    const int64_t len = std::min(chunk, total - base);
    const Round rd = next_round(len * esize);
    const uint64_t s = rd.s;
    auto share_lo = [&](int j) { return base + len * j / n; };

    // The slot was last used two chunks ago: every peer must have collected from it.
    if (s >= 2) HVD_RETURN_IF_ERROR(wait_all(kCollected, s - 1));

    // 1. publish the peers' shares
    unsigned char* mine = slot(me, rd);
    for (int j = 0; j < n; ++j) {
      if (j == me) continue;
      pieces.each(share_lo(j), share_lo(j + 1), [&](unsigned char* p, int64_t cnt, int64_t off) {
        std::memcpy(mine + (off - base) * esize, p, static_cast<size_t>(cnt * esize));
      });
    }
    header(me)->counter[kPublished].store(s + 1, std::memory_order_release);
    HVD_RETURN_IF_ERROR(wait_all(kPublished, s + 1));

    // 2. reduce my share in rank order, finish it, and publish the result in my slot. Every
    // element is folded as ((x0 op x1) op x2) ... whichever rank owns it, so a value does not
    // depend on its place in a fused batch (bitwise-reproducible resumption, tested at np 3).
    // Ranks 0 and 1 fold in their buffer (x1 op x0 is x0 op x1 bit for bit where op commutes:
    // sums and products; not min/max, which keep the first of equal-comparing values);
    // any other rank folds in its slot's own share (unused by step 1), starting with x0 op x1
    // in one pass: n - 1 reductions and a copy either way.
    const bool in_buffer = me == 0 || (me == 1 && commutes);
    pieces.each(share_lo(me), share_lo(me + 1), [&](unsigned char* p, int64_t cnt, int64_t off) {
      const int64_t at = (off - base) * esize;
      auto x = [&](int j) -> const unsigned char* { return j == me ? p : slot(j, rd) + at; };
      unsigned char* acc = in_buffer ? p : mine + at;
      fold_reduction(acc, in_buffer ? p : x(0), in_buffer ? x(1 - me) : x(1), x, n, cnt, dtype,
                     op, scale, divisor);
      std::memcpy(in_buffer ? mine + at : p, acc, static_cast<size_t>(cnt * esize));
    });
    header(me)->counter[kReduced].store(s + 1, std::memory_order_release);
    HVD_RETURN_IF_ERROR(wait_all(kReduced, s + 1));

    // 3. collect every peer's reduced share
    for (int j = 0; j < n; ++j) {
      if (j == me) continue;
      const unsigned char* src = slot(j, rd);
      pieces.each(share_lo(j), share_lo(j + 1), [&](unsigned char* p, int64_t cnt, int64_t off) {
        std::memcpy(p, src + (off - base) * esize, static_cast<size_t>(cnt * esize));
      });
    }
    header(me)->counter[kCollected].store(s + 1, std::memory_order_release);
  }
  return Status::OK();
}

}  // namespace hvd
