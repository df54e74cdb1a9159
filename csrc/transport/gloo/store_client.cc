// Copyright horovod_cpp authors.
#include "transport/gloo/store_client.h"

#include <gloo/common/error.h>
#include <netdb.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

namespace hvd {
namespace {

using Clock = std::chrono::steady_clock;

std::string seconds_text(std::chrono::milliseconds ms) {
  const double s = static_cast<double>(ms.count()) / 1000.0;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", s);
  return buf;
}

// One connection attempt to `ai`, given up at `deadline`: the socket (blocking again), or -1
// with errno set. The connect itself is non-blocking: toward an address whose packets are
// dropped (a host cut off the network) a blocking connect waits out the kernel's SYN retries,
// minutes past HOROVOD_GLOO_TIMEOUT_SECONDS.
int try_connect(const addrinfo* ai, Clock::time_point deadline) {
  const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                          ai->ai_protocol);
  if (fd < 0) return -1;
  int err = 0;
  if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    err = errno;
    while (err == EINPROGRESS || err == EINTR) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) {
        err = ETIMEDOUT;
        break;
      }
      pollfd pfd{fd, POLLOUT, 0};
      const int r = ::poll(&pfd, 1, static_cast<int>(std::min<long long>(left, 1 << 30)));
      if (r < 0) {
        err = errno;
        continue;
      }
      if (r == 0) continue;  // the deadline check above ends it
      socklen_t len = sizeof(err);
      if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      break;
    }
  }
  if (err == 0 && ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) err = errno;
  if (err == 0) return fd;
  ::close(fd);
  errno = err;
  return -1;
}

void put_u32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t get_u32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

}  // namespace

StoreClient::StoreClient(const std::string& addr, int port, std::string secret,
                         std::chrono::milliseconds timeout)
    : secret_(std::move(secret)), where_(addr + ":" + std::to_string(port)), timeout_(timeout) {
  if (secret_.size() > kMaxSecret)
    fail("the secret is over " + std::to_string(kMaxSecret) + " bytes");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) fail(std::string("cannot resolve the address: ") + gai_strerror(rc));
  // The store may start after its workers (a person starting workers by hand): refused
  // connections are retried until the timeout.
  const auto deadline = Clock::now() + timeout_;
  int last_errno = 0;
  while (fd_ < 0) {
    for (const addrinfo* ai = res; ai != nullptr && fd_ < 0; ai = ai->ai_next) {
      fd_ = try_connect(ai, deadline);
      if (fd_ < 0) last_errno = errno;
    }
    if (fd_ >= 0 || Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::freeaddrinfo(res);
  if (fd_ < 0) {
    fail("could not connect within " + seconds_text(timeout_) + ": " + std::strerror(last_errno));
  }
  const int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

std::string StoreClient::local_address() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  char host[NI_MAXHOST] = {};
  if (fd_ < 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0 ||
      ::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof(host), nullptr, 0,
                    NI_NUMERICHOST) != 0) {
    return "127.0.0.1";
  }
  return host;
}

StoreClient::~StoreClient() {
  if (fd_ >= 0) ::close(fd_);
}

void StoreClient::fail(const std::string& what) {
  throw gloo::IoException("rendezvous store at " + where_ + ": " + what);
}

void StoreClient::send_all(const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t k = ::send(fd_, c, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) fail(std::string("sending a request failed: ") + std::strerror(errno));
    c += k;
    n -= static_cast<size_t>(k);
  }
}

void StoreClient::recv_all(void* p, size_t n, const char* what) {
  char* c = static_cast<char*>(p);
  const auto deadline = Clock::now() + answer_slack_;
  while (n > 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      fail(std::string("did not answer within ") + seconds_text(answer_slack_) + " (" + what + ")");
    }
    pollfd pfd{fd_, POLLIN, 0};
    const int r = ::poll(&pfd, 1, static_cast<int>(std::min<long long>(left, 1 << 30)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;  // the deadline check above reports it
    const ssize_t k = ::recv(fd_, c, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k == 0) fail(std::string("closed the connection (") + what + ")");
    if (k < 0) fail(std::string("receiving failed: ") + std::strerror(errno));
    c += k;
    n -= static_cast<size_t>(k);
  }
}

StoreClient::Answer StoreClient::request(Op op, const std::string& key, const void* value,
                                         size_t value_len, uint32_t timeout_ms,
                                         std::vector<char>* reply) {
  if (key.empty() || key.size() > kMaxKey) {
    fail("key of " + std::to_string(key.size()) + " bytes (1 to " + std::to_string(kMaxKey) + ")");
  }
  for (char ch : key) {
    if (ch < 0x21 || ch > 0x7e) fail("key '" + key + "' has a character outside 0x21-0x7e");
  }
  if (value_len > kMaxValue) {
    fail("value of " + std::to_string(value_len) + " bytes for key '" + key + "' (at most 16 MiB)");
  }
  std::string head;
  head.reserve(32 + secret_.size() + key.size());
  put_u32(&head, kMagic);
  head.push_back(static_cast<char>(op));
  put_u32(&head, timeout_ms);
  put_u32(&head, static_cast<uint32_t>(secret_.size()));
  head += secret_;
  put_u32(&head, static_cast<uint32_t>(key.size()));
  head += key;
  put_u32(&head, static_cast<uint32_t>(value_len));
  std::lock_guard<std::mutex> lk(mu_);
  if (fd_ < 0) fail("the connection was closed after an earlier error");
  answer_slack_ = timeout_ + std::chrono::milliseconds(timeout_ms);
  try {
    send_all(head.data(), head.size());
    if (value_len > 0) send_all(value, value_len);
    unsigned char answer[5];
    recv_all(answer, sizeof(answer), key.c_str());
    const uint32_t len = get_u32(answer + 1);
    if (answer[0] > kBadRequest)
      fail("answered with an unknown status " + std::to_string(answer[0]));
    if (len > kMaxValue) fail("answered with a value of " + std::to_string(len) + " bytes");
    reply->resize(len);
    if (len > 0) recv_all(reply->data(), len, key.c_str());
    const auto status = static_cast<Answer>(answer[0]);
    if (status == kDenied || status == kBadRequest) {
      ::close(fd_);  // the server closes it too
      fd_ = -1;
      const std::string msg(reply->begin(), reply->end());
      fail(status == kDenied ? "refused the secret (" + msg + ")"
                             : "refused the request for '" + key + "' (" + msg + ")");
    }
    return status;
  } catch (...) {
    if (fd_ >= 0) {  // a half-read answer would desynchronize the next request
      ::close(fd_);
      fd_ = -1;
    }
    throw;
  }
}

void StoreClient::set(const std::string& key, const std::vector<char>& data) {
  std::vector<char> reply;
  if (request(kSet, key, data.data(), data.size(), 0, &reply) != kOk) {
    fail("SET '" + key + "' was not accepted");
  }
}

std::vector<char> StoreClient::get(const std::string& key, std::chrono::milliseconds timeout) {
  std::vector<char> reply;
  const auto ms = static_cast<uint32_t>(std::min<int64_t>(timeout.count(), UINT32_MAX));
  const Answer a = request(kGet, key, nullptr, 0, ms, &reply);
  if (a == kTimeout) fail("key '" + key + "' did not appear within " + seconds_text(timeout));
  if (a != kOk) fail("GET '" + key + "' answered status " + std::to_string(a));
  return reply;
}

std::vector<char> StoreClient::get(const std::string& key) {
  return get(key, timeout_);
}

void StoreClient::wait(const std::vector<std::string>& keys) {
  wait(keys, timeout_);
}

void StoreClient::wait(const std::vector<std::string>& keys,
                       const std::chrono::milliseconds& timeout) {
  using std::chrono::milliseconds;
  // With an abort key, the server-side wait is cut into slices of this length, the abort key
  // looked at between them.
  constexpr milliseconds kAbortPoll{250};
  const auto deadline = Clock::now() + timeout;
  for (const std::string& key : keys) {
    for (;;) {
      const auto left = std::max(
          std::chrono::duration_cast<milliseconds>(deadline - Clock::now()), milliseconds(0));
      if (abort_key_.empty()) {
        get(key, left);
        break;
      }
      const milliseconds slice = std::min(left, kAbortPoll);
      std::vector<char> reply;
      const Answer a = request(kGet, key, nullptr, 0, static_cast<uint32_t>(slice.count()), &reply);
      if (a == kOk) break;
      if (a != kTimeout) fail("GET '" + key + "' answered status " + std::to_string(a));
      if (check(abort_key_)) {
        const std::vector<char> why = get(abort_key_, milliseconds(0));
        fail("gave up waiting for '" + key + "': the elastic driver abandoned this membership (" +
             abort_key_ + "): " + std::string(why.begin(), why.end()));
      }
      if (left <= slice) fail("key '" + key + "' did not appear within " + seconds_text(timeout));
    }
  }
}

int64_t StoreClient::add(const std::string& key, int64_t delta) {
  unsigned char v[8];
  for (int i = 0; i < 8; ++i)
    v[i] = static_cast<unsigned char>(static_cast<uint64_t>(delta) >> (8 * i));
  std::vector<char> reply;
  if (request(kAdd, key, v, sizeof(v), 0, &reply) != kOk || reply.size() != 8) {
    fail("ADD '" + key + "' did not answer an 8-byte total");
  }
  uint64_t total = 0;
  for (int i = 0; i < 8; ++i)
    total |= static_cast<uint64_t>(static_cast<unsigned char>(reply[i])) << (8 * i);
  return static_cast<int64_t>(total);
}

bool StoreClient::check(const std::string& key) {
  std::vector<char> reply;
  const Answer a = request(kCheck, key, nullptr, 0, 0, &reply);
  if (a != kOk && a != kNotFound) fail("CHECK '" + key + "' answered status " + std::to_string(a));
  return a == kOk;
}

}  // namespace hvd
