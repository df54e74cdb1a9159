// Copyright horovod_cpp authors. The client of the rendezvous store that hvdrun --gloo serves.
//
// The wire protocol is issue 36's contract (shared with the Python server of
// bindings/horovod_cpp/runner): one persistent TCP connection, requests answered in order,
// each carrying the job's secret. StoreClient implements gloo::rendezvous::Store, so Gloo's
// contexts connect through it (under a gloo::rendezvous::PrefixStore for the generation, set
// and group), plus add() for counters. Every failure is a gloo::IoException whose message says
// which store and what happened; Gloo's callers (connectFullMesh) propagate it, and the
// transport catches it at its boundary (gloo_call.h).
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace hvd {

class StoreClient : public gloo::rendezvous::Store {
 public:
  /// The request's kinds and the answers' statuses, as on the wire.
  enum Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kCheck = 4 };
  enum Answer : uint8_t { kOk = 0, kTimeout = 1, kNotFound = 2, kDenied = 3, kBadRequest = 4 };
  /// Protocol bounds (the server enforces the same).
  static constexpr uint32_t kMagic = 0x53445648;  // "HVDS" little-endian
  static constexpr size_t kMaxSecret = 256, kMaxKey = 4096, kMaxValue = 16u << 20;

  /// Connects to `addr`:`port` (a name or address; trying each address getaddrinfo gives)
  /// within `timeout`. `secret` goes with every request. Throws gloo::IoException.
  StoreClient(const std::string& addr, int port, std::string secret,
              std::chrono::milliseconds timeout);
  ~StoreClient() override;
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  void set(const std::string& key, const std::vector<char>& data) override;
  /// Waits up to the client's timeout for `key`.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;
  /// Adds `delta` to the int64 counter `key` (0 when absent); returns the new total.
  int64_t add(const std::string& key, int64_t delta);
  /// True when `key` exists (no wait).
  bool check(const std::string& key);
  /// Waits up to `timeout` for `key` and returns its value.
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout);
  /// The numeric address this host uses to reach the store (where Gloo's device should
  /// listen when no interface is named).
  std::string local_address() const;
  /// "ADDR:PORT", for messages.
  const std::string& where() const { return where_; }
  /// Elastic mode: from now on wait() also gives up, with the key's value as the reason,
  /// once `key` exists (elastic/abort/<generation>: the driver gave up the membership being
  /// connected because a member was lost). Set before the connects it guards, from the
  /// thread that makes them; empty = no such key.
  void set_abort_key(std::string key) { abort_key_ = std::move(key); }

 private:
  /// Sends one request, reads its answer's status and value. Serialized (one connection).
  Answer request(Op op, const std::string& key, const void* value, size_t value_len,
                 uint32_t timeout_ms, std::vector<char>* reply);
  void send_all(const void* p, size_t n);
  void recv_all(void* p, size_t n, const char* what);
  [[noreturn]] void fail(const std::string& what);

  std::mutex mu_;
  int fd_ = -1;
  const std::string secret_;
  const std::string where_;
  const std::chrono::milliseconds timeout_;
  /// Set while a request waits for the server (the socket's receive timeout follows it).
  std::chrono::milliseconds answer_slack_{0};
  std::string abort_key_;
};

}  // namespace hvd
