// Copyright horovod_cpp authors. The completion thread of the TensorFlow kernels.
#include "completion.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace hvd_tf {
namespace {

struct Pending {
  hvd::Handle handle;
  std::function<void(const hvd::Handle&)> on_done;
};

/// One per process, created on first use and never destroyed (its thread may still be waiting
/// when the process exits; it holds nothing that needs an orderly teardown).
class Completer {
 public:
  Completer() : thread_([this] { loop(); }) { thread_.detach(); }

  void add(Pending p) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      incoming_.push_back(std::move(p));
    }
    cv_.notify_one();
  }

 private:
  // Waits on the oldest pending handle (most collectives complete in submission order, so this
  // wakes at once for them); every wake-up, and at least every millisecond while anything is
  // pending, sweeps all pending handles so that out-of-order completions are not held back.
  void loop() {
    std::vector<Pending> pending;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (pending.empty()) cv_.wait(lock, [this] { return !incoming_.empty(); });
        for (auto& p : incoming_) pending.push_back(std::move(p));
        incoming_.clear();
      }
      bool progressed = false;
      for (size_t i = 0; i < pending.size();) {
        if (pending[i].handle.poll()) {
          Pending done = std::move(pending[i]);
          pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
          done.on_done(done.handle);
          progressed = true;
        } else {
          ++i;
        }
      }
      if (!progressed && !pending.empty()) {
        try {
          pending.front().handle.wait_for(std::chrono::milliseconds(1));
        } catch (...) {
          // A failure: the next sweep hands it to its continuation.
        }
      }
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> incoming_;
  std::thread thread_;
};

Completer& completer() {
  static Completer* c = new Completer();
  return *c;
}

}  // namespace

void when_done(hvd::Handle handle, std::function<void(const hvd::Handle&)> on_done) {
  completer().add(Pending{std::move(handle), std::move(on_done)});
}

void run_detached(std::function<void()> work) { std::thread(std::move(work)).detach(); }

}  // namespace hvd_tf
