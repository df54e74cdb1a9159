// Copyright horovod_cpp authors.
#include "transport/shm/shm_transport.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>

#include "common/clock.h"
#include "kernels/host/cpu_ops.h"
#include "transport/cpu/cpu_transport.h"
#include "transport/row_layout.h"
#include "transport/shm/shm_allreduce.h"
#include "transport/shm/shm_setup.h"
#include "common/logging.h"
#include "transport/control_plane.h"

namespace hvd {
namespace {

static_assert(GatherPaths::kVoteBits <= kTransportVoteBits,
              "the measured paths' votes must fit the cycle's vote bits");

class ShmTransport : public Transport {
 public:
  /// `mpi`: the MPI data plane's transport, for the collectives of at least
  /// `measured_min_bytes` that the measured paths send there (null: none; gather_paths.h).
  ShmTransport(std::unique_ptr<ShmAllreduce> shm, int rank, int size, int64_t min_bytes,
               int64_t gather_max_bytes, std::unique_ptr<Transport> mpi, int64_t measured_min_bytes)
      : shm_(std::move(shm)),
        rank_(rank),
        size_(size),
        min_bytes_(min_bytes),
        gather_max_bytes_(gather_max_bytes),
        mpi_(std::move(mpi)),
        measured_min_bytes_(mpi_ && measured_min_bytes > 0 ? measured_min_bytes : INT64_MAX) {}
  const char* name() const override { return "shm"; }
  bool accepts(const Batch& b) const override {
    if (!b.device.is_cpu()) return false;
    switch (b.op) {
      // Adasum is not an elementwise fold (dot products): CpuTransport runs its schedule.
      case OpType::kAllreduce: return b.bytes >= min_bytes_ && b.reduction.op != ReduceOp::kAdasum;
      // Never fused; present on every rank (a joined rank fails these before a transport).
      case OpType::kReducescatter: return b.bytes >= min_bytes_ && b.tensors.size() == 1;
      case OpType::kBroadcast:
        return b.tensors.size() == 1 && b.root >= 0 && gather_sized(b.bytes);
      case OpType::kAllgather:
      case OpType::kAlltoall:
        return b.tensors.size() == 1 && gather_sized(bytes_per_rank(b));
      default: return false;
    }
  }
  uint64_t path_votes() override { return shm_->path_votes(); }
  void set_agreed_paths(uint64_t votes) override { shm_->paths().set_agreed(votes); }
  void run(Batch& b) override {
    // The reductions and broadcasts: one compare for the calls below the measured sizes
    // (every small allreduce). An allgather's or alltoall's b.bytes is rank 0's share, which
    // may be none of the call: those are sized by their longest block instead.
    if (b.bytes >= measured_min_bytes_) {
      switch (b.op) {
        case OpType::kAllreduce:
          if (mpi_same_bits(b.dtype)) return run_measured(b, GatherPaths::kAllreduce, b.bytes);
          break;
        case OpType::kReducescatter:
          if (mpi_same_bits(b.dtype)) return run_measured(b, GatherPaths::kReducescatter, b.bytes);
          break;
        case OpType::kBroadcast: return run_measured(b, GatherPaths::kBroadcastPlane, b.bytes);
        default: break;
      }
    }
    // An allreduce's first test fails here.
    if (b.op != OpType::kAllreduce && mpi_ &&
        (b.op == OpType::kAllgather || b.op == OpType::kAlltoall)) {
      return run_gather(b);
    }
    run_shm(b);
  }

 private:
  /// Runs `b` through the segments.
  void run_shm(Batch& b) {
    const int64_t t0 = b.phase ? steady_us() : 0;
    BatchOutcome out;  // an allreduce or broadcast allocates no results: out.results stays empty
    const char* phase = "SHM_ALLREDUCE";
    switch (b.op) {
      case OpType::kAllreduce: out.status = allreduce(b); break;
      case OpType::kReducescatter:
        phase = "SHM_REDUCESCATTER";
        out.results.resize(1);
        out.status = reducescatter(b, &out.results[0]);
        break;
      case OpType::kBroadcast:
        phase = "SHM_BROADCAST";
        out.status = shm_->broadcast(b.tensors[0].output.data, b.tensors[0].bytes, b.root);
        break;
      case OpType::kAllgather:
        phase = "SHM_ALLGATHER";
        out.results.resize(1);
        out.status = allgather(b, &out.results[0]);
        break;
      case OpType::kAlltoall:
        phase = "SHM_ALLTOALL";
        out.results.resize(1);
        out.status = alltoall(b, &out.results[0]);
        break;
      default: out.status = Status::Backend("the shm transport does not run this collective");
    }
    if (!out.status.ok() && b.op != OpType::kAllreduce) {  // allreduce names its tensors itself
      out.status = Status(out.status.code(), b.describe() + ": " + out.status.message());
    }
    if (b.phase) {
      const int64_t t1 = steady_us();
      for (const BatchTensor& t : b.tensors) b.phase(*t.name, phase, t0, t1, "");
    }
    b.done(std::move(out));
  }
  /// Runs an allgather or alltoall (with MPI at hand): the way the measured paths choose from
  /// the measured sizes, through the segments below them. Out of line, so that run() stays a
  /// few instructions for the small allreduces.
  [[gnu::noinline]] void run_gather(Batch& b) {
    const int64_t bytes = longest_times_ranks(b);
    if (bytes < measured_min_bytes_) return run_shm(b);
    const bool gather = b.op == OpType::kAllgather;
    run_measured(b, gather ? GatherPaths::kAllgatherPlane : GatherPaths::kAlltoallPlane, bytes);
  }
  /// Runs `b` the way the measured paths choose for `kind` and `bytes` (the same on every
  /// rank): the segments or MPI, timing it for them. Both ways are synchronous: the outcome is
  /// known on return.
  void run_measured(Batch& b, GatherPaths::Kind kind, int64_t bytes) {
    const bool mpi = shm_->paths().second_way(kind, bytes);
    bool ok = false;
    std::function<void(BatchOutcome)> done = std::move(b.done);
    b.done = [&done, &ok](BatchOutcome out) {
      ok = out.status.ok();
      done(std::move(out));
    };
    const auto t0 = std::chrono::steady_clock::now();
    if (mpi) {
      mpi_->run(b);
    } else {
      run_shm(b);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (ok) shm_->record_path(kind, bytes, mpi, seconds);
  }
  /// Whether MPI's reduction of `dtype` gives the fold's bits: the fold takes every element
  /// in rank order ((x0 op x1) op x2 ..., shm_allreduce.h), whatever its place in a fused
  /// batch, and MPI's order is its own. Two ranks' operands are exchanged exactly (x0 op x1 is
  /// x1 op x0 bit for bit), and integers are exact in any order; floats of three ranks or
  /// more would differ in their last bits, and with them a run resumed from a checkpoint.
  bool mpi_same_bits(DataType dtype) const { return size_ == 2 || !is_floating_point(dtype); }
  bool gather_sized(int64_t bytes) const { return bytes <= gather_max_bytes_; }
  /// Allgather, alltoall: the longest block times the ranks, the size by which the segments'
  /// ways are chosen too (ShmAllreduce::allgatherv, alltoallv); the same on every rank.
  int64_t longest_times_ranks(const Batch& b) const {
    const int64_t longest = b.op == OpType::kAllgather
                                ? *std::max_element(b.rank_bytes.begin(), b.rank_bytes.end())
                                : alltoall_longest_block(b);
    return saturating_mul(longest, static_cast<int64_t>(size_));
  }
  /// Allgather, alltoall: the bytes a member contributes on average (the same on every rank).
  int64_t bytes_per_rank(const Batch& b) const {
    const int64_t row = row_elements(b.shape) * static_cast<int64_t>(dtype_size(b.dtype));
    int64_t rows = 0;
    for (int64_t d : b.op == OpType::kAllgather ? b.first_dims : b.all_splits) rows += d;
    return saturating_mul(rows, row) / size_;
  }
  Status allreduce(Batch& b);
  Status reducescatter(Batch& b, TensorResult* out);
  Status allgather(Batch& b, TensorResult* out);
  Status alltoall(Batch& b, TensorResult* out);
  unsigned char* zeros(int64_t bytes) {
    if (static_cast<int64_t>(zeros_.size()) < bytes) zeros_.resize(static_cast<size_t>(bytes));
    std::memset(zeros_.data(), 0, static_cast<size_t>(bytes));
    return zeros_.data();
  }

  std::unique_ptr<ShmAllreduce> shm_;
  std::vector<Segment> segs_;  // allreduce(): the batch's segments, room kept between calls
  const int rank_;
  const int size_;
  const int64_t min_bytes_;
  const int64_t gather_max_bytes_;
  const std::unique_ptr<Transport> mpi_;
  const int64_t measured_min_bytes_;  // INT64_MAX: no measured choice of MPI
  std::vector<unsigned char> zeros_;  // the contribution of tensors a joined rank lacks
};

Status ShmTransport::allreduce(Batch& b) {
  const ReductionSpec& spec = b.reduction;
  int64_t absent_bytes = 0;
  for (const BatchTensor& t : b.tensors) {
    if (!t.present) absent_bytes += t.bytes;
  }
  unsigned char* zero = absent_bytes ? zeros(absent_bytes) : nullptr;
  std::vector<Segment>& segs = segs_;  // kept between calls (see ShmAllreduce::starts_)
  segs.clear();
  segs.reserve(b.tensors.size());
  for (const BatchTensor& t : b.tensors) {
    if (!t.present) {  // joined: zeros in, result dropped
      segs.push_back({zero, t.count});
      zero += t.bytes;
      continue;
    }
    if (t.output.data != t.input.data) {
      std::memcpy(t.output.data, t.input.data, static_cast<size_t>(t.bytes));
    }
    scale_buffer(t.output.data, t.count, b.dtype, spec.prescale);
    segs.push_back({t.output.data, t.count});
  }
  Status s = shm_->allreduce(segs, b.dtype, spec.op, spec.scale, spec.divisor);
  if (!s.ok()) {
    return Status(s.code(), "allreduce '" + b.name() + "'" + (b.fused() ? " (fused)" : "") + ": " +
                                s.message());
  }
  return Status::OK();
}

Status ShmTransport::reducescatter(Batch& b, TensorResult* out) {
  const ReductionSpec& spec = b.reduction;
  const ReducescatterSplit split = split_reducescatter(b, size_);
  const std::vector<int64_t>& counts = split.counts;
  Shape out_shape = b.shape;
  out_shape[0] = split.rows[static_cast<size_t>(rank_)];
  Tensor result = Tensor::empty(b.dtype, out_shape);  // every element is written
  Status s = shm_->reducescatter(b.tensors[0].input.data, result.data(), counts, b.dtype,
                                 spec.op, spec.prescale, spec.scale, spec.divisor);
  HVD_RETURN_IF_ERROR(s);
  out->has_tensor = true;
  out->tensor = std::move(result);
  return Status::OK();
}

Status ShmTransport::allgather(Batch& b, TensorResult* out) {
  const AllgatherPlan plan = plan_allgather(b);
  Tensor result = Tensor::empty(b.dtype, plan.shape);  // every byte is written
  HVD_RETURN_IF_ERROR(shm_->allgatherv(b.tensors[0].input.data, result.data(), plan.bytes));
  out->has_tensor = true;
  out->tensor = std::move(result);
  return Status::OK();
}

Status ShmTransport::alltoall(Batch& b, TensorResult* out) {
  AlltoallPlan plan = plan_alltoall(b, size_, rank_);
  Shape shape = b.shape;
  shape[0] = plan.rows;
  Tensor result = Tensor::empty(b.dtype, shape);  // every byte is written
  HVD_RETURN_IF_ERROR(shm_->alltoallv(b.tensors[0].input.data, plan.send_bytes, result.data(),
                                      plan.recv_bytes, plan.recv_from,
                                      alltoall_longest_block(b)));
  out->has_tensor = true;
  out->tensor = std::move(result);
  out->splits = std::move(plan.recv_rows);
  return Status::OK();
}

}  // namespace

std::unique_ptr<Transport> make_shm_transport(const TransportContext& ctx) {
  const Config& config = *ctx.config;
  if (!config.shm_enabled) return nullptr;
  std::string why_not;
  const uint64_t test_seed =
      config.test_shm_path_votes ? 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(ctx.layout.rank + 1)
                                 : 0;
  std::unique_ptr<ShmAllreduce> shm =
      make_shm_allreduce(*ctx.bootstrap, ctx.set_id, config.shm_chunk_bytes,
                         config.shm_single_copy_bytes > 0 ? config.shm_single_copy_bytes : -1,
                         config.shm_single_copy_max_bytes, config.shm_measured_min_bytes,
                         test_seed, &why_not, test_host(ctx));
  if (shm) {
    shm->set_yield_core(ctx.cores_shared);
    shm->peer_watch().set_lost_code(ctx.lost_peer_code);
  }
  if (!shm) {
    if (ctx.layout.size > 1) {
      HVD_LOG(kInfo) << "process set " << ctx.set_id << ": shared-memory allreduce unavailable ("
                     << why_not << "); CPU allreduces use MPI";
    }
    return nullptr;
  }
  // Large collectives may go to MPI instead, by measurement: where the data plane is MPI (the
  // same answer on every rank). Gloo's plane is TCP: not offered there.
  std::unique_ptr<Transport> mpi;
  if (config.shm_measured_min_bytes > 0) {
    std::unique_ptr<DataPlane> plane;
    if (ctx.bootstrap->make_data_plane(&plane).ok() && std::strcmp(plane->name(), "mpi") == 0) {
      mpi = std::make_unique<CpuTransport>(std::move(plane), ctx.layout);
      shm->paths().enable(config.shm_measured_min_bytes, test_seed, GatherPaths::kMpiKinds);
    }
  }
  shm->paths().force(static_cast<int>(config.test_shm_path) - 1);
  const int64_t gather_max =
      config.shm_gather_max_bytes > 0 ? config.shm_gather_max_bytes : INT64_MAX;
  return std::make_unique<ShmTransport>(std::move(shm), ctx.layout.rank, ctx.layout.size,
                                        config.shm_min_bytes, gather_max, std::move(mpi),
                                        config.shm_measured_min_bytes);
}

}  // namespace hvd
