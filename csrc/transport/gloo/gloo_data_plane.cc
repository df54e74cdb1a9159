// Copyright horovod_cpp authors.
#include "transport/gloo/gloo_data_plane.h"

#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/context.h>

#include <cstring>

#include "kernels/host/cpu_ops.h"
#include "transport/gloo/gloo_call.h"

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

}  // namespace

GlooDataPlane::GlooDataPlane(std::shared_ptr<gloo::Context> ctx, std::string group)
    : ctx_(std::move(ctx)), group_(std::move(group)), rank_(ctx_->rank), size_(ctx_->size) {}

Status GlooDataPlane::allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op) {
  if (count == 0 || size_ == 1) return Status::OK();
  if (op == ReduceOp::kAverage) op = ReduceOp::kSum;  // the caller divides
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

// Gloo has no reduce-scatter in its options API: the whole input is reduced (an allreduce of
// a copy) and this rank keeps its block.
Status GlooDataPlane::reducescatter(const void* in, void* out, const std::vector<int64_t>& counts,
                                    DataType dtype, ReduceOp op) {
  const size_t esize = dtype_size(dtype);
  int64_t total = 0, before = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    if (static_cast<int>(r) == rank_) before = total;
    total += counts[r];
  }
  const size_t bytes = static_cast<size_t>(total) * esize;
  if (scratch_.size() < bytes) scratch_.resize(bytes);
  if (bytes > 0) std::memcpy(scratch_.data(), in, bytes);
  HVD_RETURN_IF_ERROR(allreduce(scratch_.data(), total, dtype, op));
  const size_t mine = static_cast<size_t>(counts[static_cast<size_t>(rank_)]) * esize;
  if (mine > 0) std::memcpy(out, scratch_.data() + static_cast<size_t>(before) * esize, mine);
  return Status::OK();
}

Status GlooDataPlane::broadcast(void* buf, int64_t bytes, int root) {
  if (bytes == 0 || size_ == 1) return Status::OK();
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
