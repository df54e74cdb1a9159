// Copyright horovod_cpp authors.
#include "transport/gloo/gloo_data_plane.h"

#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "kernels/host/cpu_ops.h"
#include "transport/gloo/gloo_call.h"
#include "transport/gloo/gloo_exchange.h"

namespace hvd {
namespace {

// Gloo's reduction callback: out = a op b for n elements. Gloo may pass out == b; every op
// here is commutative, so the operands are swapped to meet reduce_to()'s aliasing rule.
void reduce_pair(DataType dtype, ReduceOp op, void* out, const void* a, const void* b, size_t n) {
  if (out == b && out != a) std::swap(a, b);
  reduce_to(out, a, b, static_cast<int64_t>(n), dtype, op);
}

// Gloo's typed setters only use the element's size: buffers are given as unsigned words of
// the dtype's width.
template <typename Word>
void allreduce_words(const std::shared_ptr<gloo::Context>& ctx, void* buf, int64_t count,
                     DataType dtype, ReduceOp op) {
  gloo::AllreduceOptions opts(ctx);
  opts.setOutput(static_cast<Word*>(buf), static_cast<size_t>(count));
  opts.setReduceFunction([dtype, op](void* out, const void* a, const void* b, size_t n) {
    reduce_pair(dtype, op, out, a, b, n);
  });
  gloo::allreduce(opts);
}

// Slots of our own point-to-point exchanges: prefixes none of Gloo's collectives uses.
constexpr uint8_t kReduceScatterSlotPrefix = 0x48;
constexpr uint8_t kSmallAllreduceSlotPrefix = 0x49;

// Up to this size an allreduce is bound by its chain of messages, not by its bytes: recursive
// doubling (log2(n) exchanges of the whole buffer) beats Gloo's ring (2(n-1) messages).
constexpr size_t kRecursiveDoublingMaxBytes = 64 << 10;

// Likewise a broadcast whose copies at the root come to at most this many bytes goes from
// the root to each member directly (one message in the chain; Gloo's tree has log2(n)).
constexpr uint8_t kSmallBroadcastSlotPrefix = 0x4a;
constexpr size_t kFlatBroadcastMaxBytes = 256 << 10;

}  // namespace

GlooDataPlane::GlooDataPlane(std::shared_ptr<gloo::Context> ctx, std::string group,
                             std::shared_ptr<DirectLinks> direct, int64_t direct_max_bytes)
    : ctx_(std::move(ctx)),
      direct_(std::move(direct)),
      group_(std::move(group)),
      rank_(ctx_->rank),
      size_(ctx_->size),
      direct_max_(direct_ ? static_cast<size_t>(std::max<int64_t>(direct_max_bytes, 0)) : 0) {}

Status GlooDataPlane::allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op) {
  if (count == 0 || size_ == 1) return Status::OK();
  if (op == ReduceOp::kAverage) op = ReduceOp::kSum;  // the caller divides
  const size_t bytes = static_cast<size_t>(count) * dtype_size(dtype);
  if (bytes <= std::max(kRecursiveDoublingMaxBytes, direct_max_)) {
    return gloo_call(group_, "gloo allreduce", [&] {
      const auto combine = [dtype, op](char* out, const char* a, const char* b, size_t n) {
        reduce_to(out, a, b, static_cast<int64_t>(n / dtype_size(dtype)), dtype, op);
      };
      char* const p = static_cast<char*>(buf);
      if (bytes <= direct_max_) {
        direct_allreduce(*direct_, p, bytes, combine);
      } else {
        recursive_doubling_allreduce(*ctx_, kSmallAllreduceSlotPrefix, p, bytes, &incoming_,
                                     combine);
      }
    });
  }
  return gloo_call(group_, "gloo allreduce", [&] {
    switch (dtype_size(dtype)) {
      case 1:
        allreduce_words<uint8_t>(ctx_, buf, count, dtype, op);
        break;
      case 2:
        allreduce_words<uint16_t>(ctx_, buf, count, dtype, op);
        break;
      case 4:
        allreduce_words<uint32_t>(ctx_, buf, count, dtype, op);
        break;
      default:
        allreduce_words<uint64_t>(ctx_, buf, count, dtype, op);
        break;
    }
  });
}

Status GlooDataPlane::allgatherv(const void* in, void* out, const std::vector<int64_t>& bytes) {
  if (size_ == 1) {
    if (bytes[0] > 0 && in != out) std::memmove(out, in, static_cast<size_t>(bytes[0]));
    return Status::OK();
  }
  int64_t total = 0;
  for (int64_t b : bytes) total += b;
  if (static_cast<size_t>(total) <= direct_max_) {
    return gloo_call(group_, "gloo allgatherv", [&] {
      direct_allgatherv(*direct_, static_cast<const char*>(in), static_cast<char*>(out), bytes);
    });
  }
  return gloo_call(group_, "gloo allgatherv", [&] {
    gloo::AllgathervOptions opts(ctx_);
    opts.setInput(const_cast<char*>(static_cast<const char*>(in)),
                  static_cast<size_t>(bytes[static_cast<size_t>(rank_)]));
    opts.setOutput(static_cast<char*>(out), std::vector<size_t>(bytes.begin(), bytes.end()));
    gloo::allgatherv(opts);
  });
}

Status GlooDataPlane::alltoallv(const void* in, const std::vector<int64_t>& send_bytes, void* out,
                                const std::vector<int64_t>& recv_bytes) {
  return gloo_call(group_, "gloo alltoallv", [&] {
    gloo::AlltoallvOptions opts(ctx_);
    opts.setInput(const_cast<char*>(static_cast<const char*>(in)), send_bytes);
    opts.setOutput(static_cast<char*>(out), recv_bytes);
    gloo::alltoallv(opts);
  });
}

// Gloo's options API has no reduce-scatter, and an allreduce moves twice the bytes one needs:
// a ring over unbound buffers instead. At step s rank r sends its running sum of block
// r-s-1 to its right neighbour and adds the left neighbour's sum of block r-s-2 into its own;
// after size-1 steps block r has every rank's part, so each rank sends and receives
// (size-1)/size of the input, as MPI_Reduce_scatter's ring does.
Status GlooDataPlane::reducescatter(const void* in, void* out, const std::vector<int64_t>& counts,
                                    DataType dtype, ReduceOp op) {
  if (op == ReduceOp::kAverage) op = ReduceOp::kSum;  // the caller divides
  const size_t esize = dtype_size(dtype);
  const size_t n = static_cast<size_t>(size_);
  std::vector<size_t> offset(n + 1, 0);
  size_t largest = 0;
  for (size_t r = 0; r < n; ++r) {
    const size_t bytes = static_cast<size_t>(counts[r]) * esize;
    offset[r + 1] = offset[r] + bytes;
    largest = std::max(largest, bytes);
  }
  const size_t me = static_cast<size_t>(rank_);
  const size_t mine = offset[me + 1] - offset[me];
  if (size_ == 1) {
    if (mine > 0 && in != out) std::memmove(out, in, mine);
    return Status::OK();
  }
  if (scratch_.size() < offset[n]) scratch_.resize(offset[n]);
  if (incoming_.size() < largest) incoming_.resize(largest);
  if (offset[n] > 0) std::memcpy(scratch_.data(), in, offset[n]);
  const auto block = [&](int s) {
    return static_cast<size_t>(((rank_ - s) % size_ + size_) % size_);
  };
  HVD_RETURN_IF_ERROR(gloo_call(group_, "gloo reducescatter", [&] {
    auto sums = ctx_->createUnboundBuffer(scratch_.data(), std::max<size_t>(offset[n], 1));
    auto from_left = ctx_->createUnboundBuffer(incoming_.data(), std::max<size_t>(largest, 1));
    const int right = (rank_ + 1) % size_, left = (rank_ + size_ - 1) % size_;
    const auto timeout = ctx_->getTimeout();
    for (int s = 0; s + 1 < size_; ++s) {
      const uint64_t slot = gloo::Slot::build(kReduceScatterSlotPrefix, static_cast<uint32_t>(s));
      const size_t send = block(s + 1), recv = block(s + 2);
      const size_t send_bytes = offset[send + 1] - offset[send];
      const size_t recv_bytes = offset[recv + 1] - offset[recv];
      if (send_bytes > 0) sums->send(right, slot, offset[send], send_bytes);
      if (recv_bytes > 0) {
        from_left->recv(left, slot, 0, recv_bytes);
        if (!from_left->waitRecv(timeout)) throw std::runtime_error("receive aborted");
        char* sum = scratch_.data() + offset[recv];
        reduce_to(sum, sum, incoming_.data(), static_cast<int64_t>(recv_bytes / esize), dtype, op);
      }
      if (send_bytes > 0 && !sums->waitSend(timeout)) throw std::runtime_error("send aborted");
    }
  }));
  if (mine > 0) std::memcpy(out, scratch_.data() + offset[me], mine);
  return Status::OK();
}

Status GlooDataPlane::broadcast(void* buf, int64_t bytes, int root) {
  if (bytes == 0 || size_ == 1) return Status::OK();
  // Flat from the root: streamed over the direct links up to their bound (the same rule as
  // the allreduce's, by the buffer's size), else through Gloo while the root's copies are few.
  const bool direct = static_cast<size_t>(bytes) <= direct_max_;
  const size_t copies = static_cast<size_t>(bytes) * static_cast<size_t>(size_ - 1);
  if (direct || copies <= kFlatBroadcastMaxBytes) {
    return gloo_call(group_, "gloo broadcast", [&] {
      flat_broadcast_bytes(*ctx_, direct ? direct_.get() : nullptr,
                           kSmallBroadcastSlotPrefix, root, static_cast<char*>(buf),
                           static_cast<size_t>(bytes));
    });
  }
  return gloo_call(group_, "gloo broadcast", [&] {
    gloo::BroadcastOptions opts(ctx_);
    opts.setRoot(root);
    opts.setOutput(static_cast<char*>(buf), static_cast<size_t>(bytes));
    gloo::broadcast(opts);
  });
}

Status GlooDataPlane::barrier() {
  if (size_ == 1) return Status::OK();
  return gloo_call(group_, "gloo barrier", [&] {
    gloo::BarrierOptions opts(ctx_);
    gloo::barrier(opts);
  });
}

}  // namespace hvd
