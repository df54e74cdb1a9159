// Copyright horovod_cpp authors. Point-to-point links whose receives are read in the
// waiting thread.
//
// An ordinary Gloo receive passes through the receiver's device-loop thread, which reads the
// socket and then wakes the waiting thread: two wake-ups per message, and on a host with
// more threads than cores each can wait for a time slice. A pair in Gloo's synchronous mode
// (Pair::setSync) is off the device loop: its socket blocks, and the waiting thread reads it
// itself. Only bound buffers complete there (an unbound buffer's wait is a condition variable
// that the loop signals), so these links keep one fixed bound buffer per peer and direction
// on a context of their own. The sockets carry the context's timeout, fixed when the pairs
// connect: a silent peer fails a receive after it, a closed connection at once.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

namespace gloo {
class Context;
namespace transport {
class Buffer;
}  // namespace transport
}  // namespace gloo

namespace hvd {

/// Synchronous links to every other member of a connected Gloo context. One thread at a time
/// uses them; messages from one peer are received in the order it sent them. Calls throw
/// what Gloo throws (run them inside gloo_call()).
class DirectLinks {
 public:
  /// The largest message: small enough that two peers sending to each other at once never
  /// fill both sockets' buffers (each writes before it reads).
  static constexpr size_t kMaxBytes = 16 * 1024;

  /// Switches every pair of `ctx` (connected; nothing else may use it) to synchronous mode.
  explicit DirectLinks(std::shared_ptr<gloo::Context> ctx);
  ~DirectLinks();
  DirectLinks(const DirectLinks&) = delete;
  DirectLinks& operator=(const DirectLinks&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  /// Where the next message to `peer` is written (kMaxBytes).
  char* outbox(int peer) { return out_.data() + kMaxBytes * static_cast<size_t>(peer); }
  /// Sends the first `bytes` (<= kMaxBytes) of outbox(peer) to `peer`; returns when the
  /// outbox may be written again.
  void send(int peer, size_t bytes);
  /// Waits for the next message from `peer`; its bytes stay valid (and may be written) until
  /// the next receive from that peer (the sender says how long it was, if that varies).
  char* receive(int peer);

  /// Called with each received piece of a stream: its offset in the stream, its bytes (valid
  /// until the next receive from that peer, and writable) and their number.
  using OnPiece = std::function<void(size_t offset, char* piece, size_t bytes)>;

  /// Sends `out_bytes` at `out` to `to` while receiving `in_bytes` from `from`, both cut into
  /// messages of kMaxBytes: one message sent, then one received, in turn, so that no socket
  /// ever holds more than two unread messages and members exchanging in any pattern (each
  /// receiving only what is sent to it) never block each other. `on_piece` gets each received
  /// piece, in order; the piece of `out` at the same offset has been sent before it comes.
  /// Either side may be empty (`to` or `from` then unused).
  void exchange(int to, const char* out, size_t out_bytes, int from, size_t in_bytes,
                const OnPiece& on_piece);

 private:
  std::shared_ptr<gloo::Context> ctx_;
  int rank_ = 0, size_ = 1;
  std::vector<char> out_, in_;  // kMaxBytes per peer each
  std::vector<std::unique_ptr<gloo::transport::Buffer>> sends_, receives_;
};

}  // namespace hvd
