// Copyright horovod_cpp authors. Latency-bound exchanges over a Gloo context, in as few
// sequential messages as they can take.
//
// Gloo's collectives are built for bandwidth: its allreduce is a ring (2(n-1) messages one
// after the other, even for one word), its broadcast a tree. Every Gloo message between two
// user threads passes through the receiver's device-loop thread, and on a host with more
// threads than cores each of those hand-offs can wait for a time slice: a small collective
// costs what its chain of messages costs. These exchanges cut the chain: recursive doubling
// for small allreduces (log2(n) exchanges), and a flat broadcast and gather whose one message
// per peer carries the length and the first bytes together. They run on unbound buffers and
// point-to-point slots of the caller's choosing, throw what Gloo throws (run them inside
// gloo_call()), and wait on a peer no longer than the context's timeout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace gloo {
class Context;
}

namespace hvd {

class DirectLinks;

/// out = a (op) b over `bytes` bytes; `out` may be `a`, never `b`.
using CombineBytes = std::function<void(char* out, const char* a, const char* b, size_t bytes)>;

/// Reduces `bytes` at `buf` with every member's by recursive doubling (ranks beyond the
/// largest power of two fold into a partner first and get the result back last). Operands
/// are always combined lower rank first, so every member ends with the same bits even for
/// operations that are not bit-commutative (a NaN in a min). `scratch` receives the peers'
/// values (grown, never shrunk). Slots: `slot_prefix` with tags 0-63.
void recursive_doubling_allreduce(gloo::Context& ctx, uint8_t slot_prefix, char* buf, size_t bytes,
                                  std::vector<char>* scratch, const CombineBytes& combine);

/// recursive_doubling_allreduce() over synchronous links (gloo_direct.h): every receive read
/// in this thread, buffers larger than DirectLinks::kMaxBytes streamed in pieces of it.
void direct_allreduce(DirectLinks& links, char* buf, size_t bytes, const CombineBytes& combine);

/// Every member's `bytes[q]` bytes into `out`, in rank order (this member's from `in`, which
/// may be its place in `out`), over synchronous links: at step k each member sends its block
/// to rank + k and receives rank - k's, streamed in pieces (n - 1 steps).
void direct_allgatherv(DirectLinks& links, const char* in, char* out,
                       const std::vector<int64_t>& bytes);

/// `bytes` at `buf` from `root` to every member, sent by the root to each directly: one
/// message in the chain, n - 1 at the root (for small buffers). Over `direct` when given
/// (links between the same members as `ctx`; streamed in pieces), else through `ctx`.
/// Slots: `slot_prefix`, tag 0.
void flat_broadcast_bytes(gloo::Context& ctx, DirectLinks* direct, uint8_t slot_prefix, int root,
                          char* buf, size_t bytes);

/// How many bytes of a blob travel with its length in the first message (the rest, if any,
/// follows as a second message).
constexpr size_t kInlineBytes = 2040;

/// `root`'s blob to every member, sent by the root to each directly: one message per member
/// when the blob fits kInlineBytes. The first message goes over `direct` when given (links
/// between the same members as `ctx`), else through `ctx` like the rest. `inbox` holds the
/// first message. Slots: `slot_prefix` with tags 0 and 1.
void flat_broadcast(gloo::Context& ctx, DirectLinks* direct, uint8_t slot_prefix, int root,
                    std::string* blob, std::vector<char>* inbox);

/// Every member's `mine` to rank 0 (`all`, in rank order; left alone elsewhere): one message
/// per member when it fits kInlineBytes. The first messages go over `direct` when given, as
/// in flat_broadcast(). `inbox` holds the first messages at rank 0. Slots: `slot_prefix` with
/// tags 0 and 1.
void flat_gather(gloo::Context& ctx, DirectLinks* direct, uint8_t slot_prefix,
                 const std::string& mine, std::vector<std::string>* all, std::vector<char>* inbox);

}  // namespace hvd
