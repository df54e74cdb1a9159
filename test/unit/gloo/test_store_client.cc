// Copyright horovod_cpp authors. StoreClient against a small store server written here, in
// the test (the product's server is hvdrun's, in Python): the protocol of issue 36's
// contract, a wrong secret, a missing key, a silent server, and Gloo groups connected
// through the client.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "gloo_threads.h"
#include "transport/gloo/store_client.h"

namespace hvd {
namespace testing {
namespace {

// The contract's server, for loopback tests: one thread per connection.
class TestStoreServer {
 public:
  TestStoreServer(std::string secret, bool mute = false) : secret_(std::move(secret)), mute_(mute) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    ::listen(listen_fd_, 64);
    socklen_t len = sizeof(a);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~TestStoreServer() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stopping_ = true;
      for (int fd : clients_) ::shutdown(fd, SHUT_RDWR);
    }
    cv_.notify_all();
    ::shutdown(listen_fd_, SHUT_RDWR);
    ::close(listen_fd_);
    acceptor_.join();
    for (auto& t : handlers_) t.join();
    for (int fd : clients_) ::close(fd);
  }
  int port() const { return port_; }

 private:
  static bool read_all(int fd, void* p, size_t n) {
    char* c = static_cast<char*>(p);
    while (n > 0) {
      const ssize_t k = ::recv(fd, c, n, 0);
      if (k <= 0) return false;
      c += k;
      n -= static_cast<size_t>(k);
    }
    return true;
  }
  static bool read_u32(int fd, uint32_t* v) {
    unsigned char b[4];
    if (!read_all(fd, b, 4)) return false;
    *v = b[0] | b[1] << 8 | b[2] << 16 | static_cast<uint32_t>(b[3]) << 24;
    return true;
  }
  static void answer(int fd, uint8_t status, const std::string& value) {
    std::string out(1, static_cast<char>(status));
    const uint32_t n = static_cast<uint32_t>(value.size());
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(n >> (8 * i)));
    out += value;
    ::send(fd, out.data(), out.size(), MSG_NOSIGNAL);
  }
  void accept_loop() {
    for (;;) {
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      std::lock_guard<std::mutex> lk(mu_);
      if (stopping_) {
        ::close(fd);
        return;
      }
      clients_.push_back(fd);
      handlers_.emplace_back([this, fd] { serve(fd); });
    }
  }
  void serve(int fd) {
    for (;;) {
      uint32_t magic = 0, timeout_ms = 0, len = 0;
      uint8_t op = 0;
      if (!read_u32(fd, &magic) || !read_all(fd, &op, 1) || !read_u32(fd, &timeout_ms)) return;
      std::string secret, key, value;
      for (std::string* s : {&secret, &key, &value}) {
        if (!read_u32(fd, &len) || len > (16u << 20)) return;
        s->resize(len);
        if (len > 0 && !read_all(fd, &(*s)[0], len)) return;
      }
      if (mute_) continue;
      if (magic != StoreClient::kMagic) return answer(fd, StoreClient::kBadRequest, "bad magic");
      if (secret != secret_) return answer(fd, StoreClient::kDenied, "wrong secret");
      std::unique_lock<std::mutex> lk(mu_);
      if (op == StoreClient::kSet) {
        data_[key] = value;
        cv_.notify_all();
        answer(fd, StoreClient::kOk, "");
      } else if (op == StoreClient::kGet) {
        cv_.wait_for(lk, std::chrono::milliseconds(timeout_ms),
                     [&] { return stopping_ || data_.count(key) > 0; });
        auto it = data_.find(key);
        if (it == data_.end()) {
          answer(fd, StoreClient::kTimeout, "");
        } else {
          answer(fd, StoreClient::kOk, it->second);
        }
      } else if (op == StoreClient::kAdd) {
        int64_t total = 0, delta = 0;
        std::string& cur = data_[key];
        if (cur.size() == 8) std::memcpy(&total, cur.data(), 8);
        std::memcpy(&delta, value.data(), 8);
        total += delta;
        cur.assign(reinterpret_cast<const char*>(&total), 8);
        answer(fd, StoreClient::kOk, cur);
      } else if (op == StoreClient::kCheck) {
        answer(fd, data_.count(key) ? StoreClient::kOk : StoreClient::kNotFound, "");
      } else {
        return answer(fd, StoreClient::kBadRequest, "bad op");
      }
    }
  }

  const std::string secret_;
  const bool mute_;
  int listen_fd_ = -1, port_ = 0;
  std::thread acceptor_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::vector<int> clients_;
  std::vector<std::thread> handlers_;
  std::map<std::string, std::string> data_;
};

const std::string kSecret(64, 'c');

std::string failure_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("store client: set, get, wait, add, check over the contract's protocol", "[gloo]") {
  TestStoreServer server(kSecret);
  StoreClient a("127.0.0.1", server.port(), kSecret, std::chrono::seconds(5));
  StoreClient b("127.0.0.1", server.port(), kSecret, std::chrono::seconds(5));
  CHECK_FALSE(a.check("g0/x"));
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    a.set("g0/x", {'h', 'i'});
  });
  CHECK(b.get("g0/x") == std::vector<char>{'h', 'i'});  // waits for the SET
  late.join();
  CHECK(a.check("g0/x"));
  b.wait({"g0/x"}, std::chrono::milliseconds(100));
  CHECK(a.add("g0/count", 5) == 5);
  CHECK(b.add("g0/count", -2) == 3);
  std::vector<char> big(1 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 13);
  a.set("g0/big", big);
  CHECK(b.get("g0/big") == big);
  const std::string missing =
      failure_of([&] { b.get("g0/never", std::chrono::milliseconds(200)); });
  CHECK(missing.find("key 'g0/never' did not appear within 0.2 s") != std::string::npos);
  // The client checks keys before sending.
  CHECK(failure_of([&] { a.set("has space", {}); }).find("outside 0x21-0x7e") != std::string::npos);
}

TEST_CASE("store client: a wrong secret, a silent server and no server fail clearly", "[gloo]") {
  TestStoreServer server(kSecret);
  StoreClient wrong("127.0.0.1", server.port(), std::string(64, 'x'), std::chrono::seconds(5));
  const std::string denied = failure_of([&] { wrong.set("g0/k", {'1'}); });
  CHECK(denied.find("rendezvous store at 127.0.0.1:" + std::to_string(server.port()) +
                    ": refused the secret") != std::string::npos);
  // The connection is closed after a refusal: the next request says so instead of hanging.
  CHECK(failure_of([&] { wrong.check("g0/k"); }).find("closed") != std::string::npos);

  TestStoreServer mute(kSecret, /*mute=*/true);
  StoreClient silent("127.0.0.1", mute.port(), kSecret, std::chrono::milliseconds(300));
  CHECK(failure_of([&] { silent.check("g0/k"); }).find("did not answer within 0.3 s") !=
        std::string::npos);

  int port = 0;
  {
    TestStoreServer gone(kSecret);
    port = gone.port();
  }
  const std::string refused = failure_of(
      [&] { StoreClient c("127.0.0.1", port, kSecret, std::chrono::milliseconds(300)); });
  CHECK(refused.find("could not connect within 0.3 s") != std::string::npos);
}

TEST_CASE("store client: a store whose SYNs go unanswered fails at the timeout", "[gloo]") {
  // A listener that never accepts, its queue full: the kernel drops further SYNs on loopback
  // as it would for a host cut off the network, so a blocking connect would wait out the SYN
  // retries (1 s, 3 s, ...) whatever the timeout.
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  REQUIRE(::listen(listener, 0) == 0);
  socklen_t len = sizeof(a);
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
  std::vector<int> queued;
  for (int i = 0; i < 4; ++i) {  // fills the accept queue (the backlog rounds up)
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    queued.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto start = std::chrono::steady_clock::now();
  const std::string stuck = failure_of(
      [&] { StoreClient c("127.0.0.1", ntohs(a.sin_port), kSecret, std::chrono::milliseconds(300)); });
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int fd : queued) ::close(fd);
  ::close(listener);
  INFO(stuck);
  CHECK(stuck.find("could not connect within 0.3 s") != std::string::npos);
  CHECK(took < 0.9);  // the timeout, not the kernel's first SYN retry (1 s)
}

TEST_CASE("store client: with an abort key, wait() gives up when the key appears", "[gloo]") {
  TestStoreServer server(kSecret);
  StoreClient a("127.0.0.1", server.port(), kSecret, std::chrono::seconds(10));
  StoreClient driver("127.0.0.1", server.port(), kSecret, std::chrono::seconds(10));
  a.set_abort_key("elastic/abort/1");
  // Keys that come are still waited for, across the slices the wait is cut into.
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    driver.set("g1/world/0", {'x'});
  });
  a.wait({"g1/world/0"}, std::chrono::seconds(5));
  late.join();
  // No key and no abort: the timeout, as without an abort key.
  CHECK(failure_of([&] { a.wait({"g1/never"}, std::chrono::milliseconds(400)); })
            .find("key 'g1/never' did not appear within 0.4 s") != std::string::npos);
  // Another generation's abort key is not this one's.
  driver.set("elastic/abort/0", {'o', 'l', 'd'});
  std::thread lost([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const std::string why = "worker h:1 on host h was killed by signal 9";
    driver.set("elastic/abort/1", std::vector<char>(why.begin(), why.end()));
  });
  const auto start = std::chrono::steady_clock::now();
  const std::string given_up = failure_of([&] { a.wait({"g1/world/2"}, std::chrono::seconds(10)); });
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  lost.join();
  INFO(given_up);
  CHECK(given_up.find("gave up waiting for 'g1/world/2': the elastic driver abandoned this "
                      "membership (elastic/abort/1): worker h:1 on host h was killed by "
                      "signal 9") != std::string::npos);
  CHECK(took < 2.0);  // a slice after the key, not the 10 s timeout
}

TEST_CASE("store client: Gloo groups connect through it (3 ranks, a second generation)", "[gloo]") {
  TestStoreServer server(kSecret);
  for (const char* generation : {"g0", "g1"}) {
    std::vector<std::unique_ptr<StoreClient>> clients;
    ThreadedGlooJob job(3);
    for (int r = 0; r < 3; ++r) {
      clients.push_back(std::make_unique<StoreClient>("127.0.0.1", server.port(), kSecret,
                                                      std::chrono::seconds(10)));
      job.job(r)->store = clients.back().get();
    }
    job.run(std::string(generation) + "/world", [&](int r, GlooBootstrap& world) {
      std::unique_ptr<DataPlane> plane;
      world.make_data_plane(&plane);
      int64_t v = 10 * (r + 1);
      const Status s = plane->allreduce(&v, 1, DataType::kInt64, ReduceOp::kSum);
      if (!s.ok() || v != 60) job.fail(r, "allreduce " + s.message());
    });
    CHECK(job.failures() == std::vector<std::string>{});
  }
}

}  // namespace testing
}  // namespace hvd
