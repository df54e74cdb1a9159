// Copyright horovod_cpp authors.
#include "transport/gloo/gloo_exchange.h"

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "transport/gloo/gloo_direct.h"

namespace hvd {
namespace {

using Buffer = gloo::transport::UnboundBuffer;

// Tags of the recursive doubling: the fold into a partner, the doubling steps, the result
// sent back to the folded rank.
constexpr uint32_t kFoldTag = 0;
constexpr uint32_t kUnfoldTag = 63;
constexpr int kMaxSteps = 31;  // ranks are ints

// The header of a broadcast's or a gather's first message: the blob's length.
constexpr size_t kHeader = sizeof(int64_t);
constexpr size_t kFirstMessage = kHeader + kInlineBytes;
constexpr int64_t kMaxBlob = int64_t{1} << 40;

// Gloo returns false when a wait was aborted; a timeout or a lost peer throws.
void wait_recv(Buffer& b, std::chrono::milliseconds timeout) {
  if (!b.waitRecv(timeout)) throw std::runtime_error("receive aborted");
}
void wait_send(Buffer& b, std::chrono::milliseconds timeout) {
  if (!b.waitSend(timeout)) throw std::runtime_error("send aborted");
}

std::unique_ptr<Buffer> buffer_of(gloo::Context& ctx, char* p, size_t bytes) {
  return ctx.createUnboundBuffer(p, bytes);
}

// The first message's length field, checked: a peer running other code could send anything.
int64_t length_in(const char* head, int from) {
  int64_t len = 0;
  std::memcpy(&len, head, sizeof(len));
  if (len < 0 || len > kMaxBlob) {
    throw std::runtime_error("rank " + std::to_string(from) + " sent a length of " +
                             std::to_string(len));
  }
  return len;
}

// Writes the first message of `blob` (length, then up to kInlineBytes) into `out`; returns its
// size.
size_t first_message(const std::string& blob, std::vector<char>* out) {
  out->resize(kFirstMessage);
  const int64_t len = static_cast<int64_t>(blob.size());
  std::memcpy(out->data(), &len, sizeof(len));
  const size_t inline_bytes = std::min(blob.size(), kInlineBytes);
  if (inline_bytes > 0) std::memcpy(out->data() + kHeader, blob.data(), inline_bytes);
  return kHeader + inline_bytes;
}

// Sends all of `b` from the root to every other member, then waits for every send.
void send_to_all(gloo::Context& ctx, Buffer& b, int root, uint64_t slot,
                 std::chrono::milliseconds timeout) {
  for (int q = 0; q < ctx.size; ++q) {
    if (q != root) b.send(q, slot);
  }
  for (int q = 1; q < ctx.size; ++q) wait_send(b, timeout);
}

// The root's `bytes` at `p` to every other member over the direct links, streamed.
void direct_send_to_all(DirectLinks& links, int root, const char* p, size_t bytes) {
  for (int q = 0; q < links.size(); ++q) {
    if (q != root) links.exchange(q, p, bytes, q, 0, nullptr);
  }
}

// buf = buf (op) their_value, the lower rank's operand first whichever side computes, so that
// both sides get the same bits; `their_value` (from `peer`) may be overwritten.
void combine_in_rank_order(int rank, int peer, char* buf, char* their_value, size_t bytes,
                           const CombineBytes& combine) {
  if (rank < peer) {
    combine(buf, buf, their_value, bytes);
  } else {
    combine(their_value, their_value, buf, bytes);
    std::memcpy(buf, their_value, bytes);
  }
}

}  // namespace

void recursive_doubling_allreduce(gloo::Context& ctx, uint8_t slot_prefix, char* buf, size_t bytes,
                                  std::vector<char>* scratch, const CombineBytes& combine) {
  const int n = ctx.size, r = ctx.rank;
  if (n == 1 || bytes == 0) return;
  int p = 1, steps = 0;
  while (p <= n / 2) {
    p *= 2;
    ++steps;
  }
  const int extra = n - p;
  const auto timeout = ctx.getTimeout();
  const auto slot = [&](uint32_t tag) { return gloo::Slot::build(slot_prefix, tag); };
  // One region of `scratch` (and one buffer: their completions must not be confused) per
  // message this rank receives, every receive posted before anything is sent: a send that
  // finds its receive posted goes out at once, without a round trip through the peer's
  // device loop.
  if (scratch->size() < bytes * static_cast<size_t>(steps + 1)) {
    scratch->resize(bytes * static_cast<size_t>(steps + 1));
  }
  char* const in = scratch->data();
  auto mine = buffer_of(ctx, buf, bytes);
  if (r >= p) {  // folded: my value to r - p, the result back from it
    auto result = buffer_of(ctx, in, bytes);
    result->recv(r - p, slot(kUnfoldTag));
    mine->send(r - p, slot(kFoldTag));
    wait_send(*mine, timeout);
    wait_recv(*result, timeout);
    std::memcpy(buf, in, bytes);
    return;
  }
  std::array<std::unique_ptr<Buffer>, kMaxSteps + 1> theirs;
  for (int s = r < extra ? 0 : 1; s <= steps; ++s) {
    theirs[static_cast<size_t>(s)] = buffer_of(ctx, in + bytes * static_cast<size_t>(s), bytes);
  }
  if (r < extra) theirs[0]->recv(r + p, slot(kFoldTag));
  for (int s = 1; s <= steps; ++s) {
    theirs[static_cast<size_t>(s)]->recv(r ^ (1 << (s - 1)), slot(static_cast<uint32_t>(s)));
  }
  const auto combine_with = [&](int peer, char* their_value) {
    combine_in_rank_order(r, peer, buf, their_value, bytes, combine);
  };
  if (r < extra) {
    wait_recv(*theirs[0], timeout);
    combine_with(r + p, in);
  }
  for (int s = 1; s <= steps; ++s) {
    const int peer = r ^ (1 << (s - 1));
    mine->send(peer, slot(static_cast<uint32_t>(s)));
    wait_recv(*theirs[static_cast<size_t>(s)], timeout);
    wait_send(*mine, timeout);  // before `buf` changes
    combine_with(peer, in + bytes * static_cast<size_t>(s));
  }
  if (r < extra) {
    mine->send(r + p, slot(kUnfoldTag));
    wait_send(*mine, timeout);
  }
}

void direct_allreduce(DirectLinks& links, char* buf, size_t bytes, const CombineBytes& combine) {
  const int n = links.size(), r = links.rank();
  if (n == 1 || bytes == 0) return;
  int p = 1;
  while (p <= n / 2) p *= 2;
  const int extra = n - p;
  if (r >= p) {  // folded: my value to r - p, the result back from it
    links.exchange(r - p, buf, bytes, r - p, 0, nullptr);
    links.exchange(r - p, nullptr, 0, r - p, bytes, [buf](size_t at, char* piece, size_t len) {
      std::memcpy(buf + at, piece, len);
    });
    return;
  }
  const auto combine_from = [&](int peer) {
    return [&, peer](size_t at, char* piece, size_t len) {
      combine_in_rank_order(r, peer, buf + at, piece, len, combine);
    };
  };
  if (r < extra) links.exchange(r + p, nullptr, 0, r + p, bytes, combine_from(r + p));
  for (int bit = 1; bit < p; bit *= 2) {
    const int peer = r ^ bit;
    // Each piece of `buf` goes out before the peer's piece at the same offset is combined in.
    links.exchange(peer, buf, bytes, peer, bytes, combine_from(peer));
  }
  if (r < extra) links.exchange(r + p, buf, bytes, r + p, 0, nullptr);
}

void direct_allgatherv(DirectLinks& links, const char* in, char* out,
                       const std::vector<int64_t>& bytes) {
  const int n = links.size(), r = links.rank();
  std::vector<size_t> at(static_cast<size_t>(n) + 1, 0);
  for (int q = 0; q < n; ++q) {
    at[static_cast<size_t>(q) + 1] =
        at[static_cast<size_t>(q)] + static_cast<size_t>(bytes[static_cast<size_t>(q)]);
  }
  const size_t mine = static_cast<size_t>(bytes[static_cast<size_t>(r)]);
  char* const my_place = out + at[static_cast<size_t>(r)];
  if (mine > 0 && my_place != in) std::memmove(my_place, in, mine);
  for (int k = 1; k < n; ++k) {
    const int to = (r + k) % n, from = (r + n - k) % n;
    char* const dest = out + at[static_cast<size_t>(from)];
    links.exchange(
        to, my_place, mine, from, static_cast<size_t>(bytes[static_cast<size_t>(from)]),
        [dest](size_t off, char* piece, size_t len) { std::memcpy(dest + off, piece, len); });
  }
}

void flat_broadcast(gloo::Context& ctx, DirectLinks* direct, uint8_t slot_prefix, int root,
                    std::string* blob, std::vector<char>* inbox) {
  const int n = ctx.size, r = ctx.rank;
  if (n == 1) return;
  const auto timeout = ctx.getTimeout();
  const uint64_t head_slot = gloo::Slot::build(slot_prefix, 0);
  const uint64_t rest_slot = gloo::Slot::build(slot_prefix, 1);
  if (r == root) {
    const size_t head_bytes = first_message(*blob, inbox);
    if (direct != nullptr) {
      direct_send_to_all(*direct, root, inbox->data(), head_bytes);
    } else {
      send_to_all(ctx, *buffer_of(ctx, inbox->data(), head_bytes), root, head_slot, timeout);
    }
    if (blob->size() > kInlineBytes) {
      send_to_all(ctx, *buffer_of(ctx, &(*blob)[kInlineBytes], blob->size() - kInlineBytes), root,
                  rest_slot, timeout);
    }
    return;
  }
  // The root's first message may be shorter than kFirstMessage: it says how long it is.
  const char* head = nullptr;
  if (direct != nullptr) {
    head = direct->receive(root);
  } else {
    inbox->resize(kFirstMessage);
    auto b = buffer_of(ctx, inbox->data(), kFirstMessage);
    b->recv(root, head_slot);
    wait_recv(*b, timeout);
    head = inbox->data();
  }
  const int64_t len = length_in(head, root);
  const size_t inline_bytes = std::min(static_cast<size_t>(len), kInlineBytes);
  blob->assign(head + kHeader, inline_bytes);
  if (static_cast<size_t>(len) <= kInlineBytes) return;
  blob->resize(static_cast<size_t>(len));
  auto rest = buffer_of(ctx, &(*blob)[kInlineBytes], blob->size() - kInlineBytes);
  rest->recv(root, rest_slot);
  wait_recv(*rest, timeout);
}

void flat_broadcast_bytes(gloo::Context& ctx, DirectLinks* direct, uint8_t slot_prefix, int root,
                          char* buf, size_t bytes) {
  if (ctx.size == 1 || bytes == 0) return;
  if (direct != nullptr) {
    if (ctx.rank == root) {
      direct_send_to_all(*direct, root, buf, bytes);
    } else {
      direct->exchange(root, nullptr, 0, root, bytes, [buf](size_t at, char* piece, size_t len) {
        std::memcpy(buf + at, piece, len);
      });
    }
    return;
  }
  const auto timeout = ctx.getTimeout();
  const uint64_t slot = gloo::Slot::build(slot_prefix, 0);
  auto b = buffer_of(ctx, buf, bytes);
  if (ctx.rank == root) {
    send_to_all(ctx, *b, root, slot, timeout);
  } else {
    b->recv(root, slot);
    wait_recv(*b, timeout);
  }
}

void flat_gather(gloo::Context& ctx, DirectLinks* direct, uint8_t slot_prefix,
                 const std::string& mine, std::vector<std::string>* all, std::vector<char>* inbox) {
  const int n = ctx.size, r = ctx.rank;
  const auto timeout = ctx.getTimeout();
  const uint64_t head_slot = gloo::Slot::build(slot_prefix, 0);
  const uint64_t rest_slot = gloo::Slot::build(slot_prefix, 1);
  if (r != 0) {
    const size_t head_bytes = first_message(mine, inbox);
    std::unique_ptr<Buffer> head, rest;
    if (direct != nullptr) {
      std::memcpy(direct->outbox(0), inbox->data(), head_bytes);
      direct->send(0, head_bytes);
    } else {
      head = buffer_of(ctx, inbox->data(), head_bytes);
      head->send(0, head_slot);
    }
    if (mine.size() > kInlineBytes) {
      rest =
          buffer_of(ctx, const_cast<char*>(mine.data()) + kInlineBytes, mine.size() - kInlineBytes);
      rest->send(0, rest_slot);
    }
    if (head) wait_send(*head, timeout);
    if (rest) wait_send(*rest, timeout);
    return;
  }
  all->resize(static_cast<size_t>(n));
  (*all)[0] = mine;
  if (n == 1) return;
  inbox->resize(kFirstMessage * static_cast<size_t>(n));
  if (direct != nullptr) {
    for (int q = 1; q < n; ++q) {
      std::memcpy(inbox->data() + kFirstMessage * static_cast<size_t>(q), direct->receive(q),
                  kFirstMessage);
    }
  } else {
    auto heads = buffer_of(ctx, inbox->data(), inbox->size());
    for (int q = 1; q < n; ++q) {
      heads->recv(q, head_slot, kFirstMessage * static_cast<size_t>(q), kFirstMessage);
    }
    for (int q = 1; q < n; ++q) wait_recv(*heads, timeout);
  }
  std::vector<std::unique_ptr<Buffer>> rests;
  for (int q = 1; q < n; ++q) {
    const char* head = inbox->data() + kFirstMessage * static_cast<size_t>(q);
    const int64_t len = length_in(head, q);
    std::string& s = (*all)[static_cast<size_t>(q)];
    s.assign(head + kHeader, std::min(static_cast<size_t>(len), kInlineBytes));
    if (static_cast<size_t>(len) <= kInlineBytes) continue;
    s.resize(static_cast<size_t>(len));
    rests.push_back(buffer_of(ctx, &s[kInlineBytes], s.size() - kInlineBytes));
    rests.back()->recv(q, rest_slot);
  }
  for (auto& b : rests) wait_recv(*b, timeout);
}

}  // namespace hvd
