// Copyright horovod_cpp authors.
#include "transport/gloo/gloo_direct.h"

#include <gloo/context.h>
#include <gloo/transport/buffer.h>
#include <gloo/transport/pair.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

namespace hvd {
namespace {
// One slot per direction and pair: a pair's buffers are its own, so every pair may use it.
constexpr int kSlot = 0;
}  // namespace

DirectLinks::DirectLinks(std::shared_ptr<gloo::Context> ctx)
    : ctx_(std::move(ctx)), rank_(ctx_->rank), size_(ctx_->size) {
  const auto n = static_cast<size_t>(size_);
  out_.resize(kMaxBytes * n);
  in_.resize(kMaxBytes * n);
  sends_.resize(n);
  receives_.resize(n);
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    auto& pair = ctx_->getPair(q);
    pair->setSync(true, /*busyPoll=*/false);
    const auto i = static_cast<size_t>(q);
    sends_[i] = pair->createSendBuffer(kSlot, outbox(q), kMaxBytes);
    receives_[i] = pair->createRecvBuffer(kSlot, in_.data() + kMaxBytes * i, kMaxBytes);
  }
}

DirectLinks::~DirectLinks() {
  // The buffers unregister from their pairs: before the context closes them.
  sends_.clear();
  receives_.clear();
}

void DirectLinks::send(int peer, size_t bytes) {
  if (bytes > kMaxBytes) {
    throw std::logic_error("a direct message of " + std::to_string(bytes) + " bytes");
  }
  auto& b = *sends_[static_cast<size_t>(peer)];
  b.send(0, bytes);
  b.waitSend();
}

void DirectLinks::exchange(int to, const char* out, size_t out_bytes, int from, size_t in_bytes,
                           const OnPiece& on_piece) {
  size_t sent = 0, received = 0;
  while (sent < out_bytes || received < in_bytes) {
    if (sent < out_bytes) {
      const size_t n = std::min(kMaxBytes, out_bytes - sent);
      std::memcpy(outbox(to), out + sent, n);
      send(to, n);
      sent += n;
    }
    if (received < in_bytes) {
      const size_t n = std::min(kMaxBytes, in_bytes - received);
      on_piece(received, receive(from), n);
      received += n;
    }
  }
}

char* DirectLinks::receive(int peer) {
  receives_[static_cast<size_t>(peer)]->waitRecv();
  return in_.data() + kMaxBytes * static_cast<size_t>(peer);
}

}  // namespace hvd
