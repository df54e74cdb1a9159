// Copyright horovod_cpp authors.
#include "transport/gloo/gloo_control_plane.h"

#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "transport/gloo/gloo_call.h"

namespace hvd {
namespace {

// The gather's point-to-point messages: lengths, then bytes (Gloo's own collectives use
// prefixes 0x01-0x08; this context runs nothing else).
constexpr uint8_t kGatherLengthSlot = 0x10;
constexpr uint8_t kGatherBytesSlot = 0x11;

void and_words(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<uint64_t*>(out);
  const auto* x = static_cast<const uint64_t*>(a);
  const auto* y = static_cast<const uint64_t*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = x[i] & y[i];
}

// Waits for a point-to-point transfer; Gloo returns false when the wait was aborted.
void wait_recv(gloo::transport::UnboundBuffer& b, std::chrono::milliseconds timeout) {
  if (!b.waitRecv(timeout)) throw std::runtime_error("receive aborted");
}
void wait_send(gloo::transport::UnboundBuffer& b, std::chrono::milliseconds timeout) {
  if (!b.waitSend(timeout)) throw std::runtime_error("send aborted");
}

}  // namespace

GlooControlPlane::GlooControlPlane(std::shared_ptr<gloo::Context> ctx, std::string group)
    : ctx_(std::move(ctx)), group_(std::move(group)), rank_(ctx_->rank), size_(ctx_->size) {}

Status GlooControlPlane::allreduce_and(std::vector<uint64_t>* words) {
  if (size_ == 1 || words->empty()) return Status::OK();
  return gloo_call(group_, "coordination bit vector exchange (gloo allreduce)", [&] {
    gloo::AllreduceOptions opts(ctx_);
    opts.setOutput(words->data(), words->size());
    opts.setReduceFunction(&and_words);
    gloo::allreduce(opts);
  });
}

Status GlooControlPlane::gather(const std::string& mine, std::vector<std::string>* all) {
  if (size_ == 1) {
    all->assign(1, mine);
    return Status::OK();
  }
  return gloo_call(group_, "negotiation gather (gloo point to point)", [&] {
    const auto timeout = ctx_->getTimeout();
    if (rank_ != 0) {
      int64_t len = static_cast<int64_t>(mine.size());
      auto lb = ctx_->createUnboundBuffer(&len, sizeof(len));
      lb->send(0, gloo::Slot::build(kGatherLengthSlot, 0));
      std::unique_ptr<gloo::transport::UnboundBuffer> db;
      if (len > 0) {
        db = ctx_->createUnboundBuffer(const_cast<char*>(mine.data()), mine.size());
        db->send(0, gloo::Slot::build(kGatherBytesSlot, 0));
      }
      wait_send(*lb, timeout);
      if (db) wait_send(*db, timeout);
      return;
    }
    lengths_.assign(static_cast<size_t>(size_), 0);
    auto lb = ctx_->createUnboundBuffer(lengths_.data(), lengths_.size() * sizeof(int64_t));
    for (int r = 1; r < size_; ++r) {
      lb->recv(r, gloo::Slot::build(kGatherLengthSlot, 0), sizeof(int64_t) * static_cast<size_t>(r),
               sizeof(int64_t));
    }
    for (int r = 1; r < size_; ++r) wait_recv(*lb, timeout);
    all->resize(static_cast<size_t>(size_));
    (*all)[0] = mine;
    std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> bufs;
    for (int r = 1; r < size_; ++r) {
      const int64_t len = lengths_[static_cast<size_t>(r)];
      if (len < 0 || len > (int64_t{1} << 40)) {
        throw std::runtime_error("rank " + std::to_string(r) + " sent a length of " +
                                 std::to_string(len));
      }
      std::string& s = (*all)[static_cast<size_t>(r)];
      s.resize(static_cast<size_t>(len));
      if (len == 0) continue;
      bufs.push_back(ctx_->createUnboundBuffer(&s[0], s.size()));
      bufs.back()->recv(r, gloo::Slot::build(kGatherBytesSlot, 0));
    }
    for (auto& b : bufs) wait_recv(*b, timeout);
  });
}

Status GlooControlPlane::broadcast(std::string* blob) {
  if (size_ == 1) return Status::OK();
  return gloo_call(group_, "negotiation broadcast (gloo)", [&] {
    int64_t len = static_cast<int64_t>(blob->size());
    {
      gloo::BroadcastOptions opts(ctx_);
      opts.setRoot(0);
      opts.setOutput(&len, 1);
      gloo::broadcast(opts);
    }
    if (len < 0 || len > (int64_t{1} << 40))
      throw std::runtime_error("rank 0 sent a length of " + std::to_string(len));
    blob->resize(static_cast<size_t>(len));
    if (len == 0) return;
    gloo::BroadcastOptions opts(ctx_);
    opts.setRoot(0);
    opts.setOutput(&(*blob)[0], blob->size());
    gloo::broadcast(opts);
  });
}

}  // namespace hvd
