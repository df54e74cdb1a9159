// Copyright horovod_cpp authors. Gloo groups whose members are threads of one process.
//
// Each rank is a thread with a GlooJob of its own (its own loopback TCP device, its own host
// name) over one in-memory gloo::rendezvous::HashStore, so the groups connect and exchange
// through real Gloo TCP pairs as the processes of a job do. Catch's macros are not
// thread-safe: rank threads record what went wrong in their own list, and the test thread
// checks every list after joining.
#pragma once

#include <gloo/rendezvous/hash_store.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "transport/gloo/gloo_bootstrap.h"

namespace hvd {
namespace testing {

/// The store and every rank's GlooJob of one threaded job.
class ThreadedGlooJob {
 public:
  /// `hosts_of`: rank -> host name (default: all on "host0"); `op_timeout`: Gloo's wait.
  explicit ThreadedGlooJob(int size,
                           std::chrono::milliseconds op_timeout = std::chrono::seconds(10),
                           std::function<std::string(int)> hosts_of = {})
      : jobs_(static_cast<size_t>(size)), failures_(static_cast<size_t>(size)) {
    for (int r = 0; r < size; ++r) {
      GlooJob& j = jobs_[static_cast<size_t>(r)];
      j.store = &store_;
      j.device = make_loopback_device();
      j.connect_timeout = std::chrono::seconds(20);
      j.op_timeout = op_timeout;
      j.hostname = hosts_of ? hosts_of(r) : "host0";
    }
  }
  int size() const { return static_cast<int>(jobs_.size()); }
  GlooJob* job(int rank) { return &jobs_[static_cast<size_t>(rank)]; }
  gloo::rendezvous::Store& store() { return store_; }

  /// Runs `fn(rank, world)` on one thread per rank, `world` connected over every rank
  /// under `prefix`; returns when all are done. A failed connect is recorded.
  void run(const std::string& prefix, const std::function<void(int, GlooBootstrap&)>& fn) {
    std::vector<std::thread> threads;
    for (int r = 0; r < size(); ++r) {
      threads.emplace_back([&, r] {
        std::unique_ptr<GlooBootstrap> world;
        const Status s = GlooBootstrap::connect(job(r), prefix, r, size(), "test world", &world);
        if (!s.ok()) {
          fail(r, "connect: " + s.message());
          return;
        }
        fn(r, *world);
      });
    }
    for (auto& t : threads) t.join();
  }

  /// Records a failure seen by `rank` (called on that rank's thread only).
  void fail(int rank, const std::string& what) {
    failures_[static_cast<size_t>(rank)].push_back("rank " + std::to_string(rank) + ": " + what);
  }
  /// Every failure of every rank, after run().
  std::vector<std::string> failures() const {
    std::vector<std::string> all;
    for (const auto& f : failures_) all.insert(all.end(), f.begin(), f.end());
    return all;
  }

 private:
  gloo::rendezvous::HashStore store_;
  std::vector<GlooJob> jobs_;
  std::vector<std::vector<std::string>> failures_;
};

}  // namespace testing
}  // namespace hvd
