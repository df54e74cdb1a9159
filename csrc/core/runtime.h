// Copyright horovod_cpp authors. The Runtime: the one object that owns everything.
//
// Made by hvd::init() and destroyed by hvd::shutdown(). It owns the configuration, the MPI
// context, the control and data planes, the controller, the executor, the table of pending
// tensors and the background thread.
//
// Threads: user threads call enqueue() (any number, concurrently); the background thread
// runs loop(). They share only `mu_`-guarded state: table_, new_requests_, the shutdown flag
// and the stop reason. Everything else is the background thread's alone.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backends/data_plane.h"
#include "backends/mpi/mpi_context.h"
#include "common/config.h"
#include "coordination/control_plane.h"
#include "coordination/controller.h"
#include "core/executor.h"
#include "core/tensor_entry.h"
#include "horovod_cpp/api.h"

namespace hvd {

class Runtime {
 public:
  /// Initializes MPI and starts the background thread.
  static Status create(const InitOptions& options, std::unique_ptr<Runtime>* out);
  ~Runtime();

  /// Submits entries atomically (a group arrives in one cycle). Fails at once, submitting
  /// nothing, if a name is already pending or the runtime has stopped.
  Status enqueue(std::vector<TensorEntry> entries);

  /// Asks every rank to stop (collective in effect) and waits for this rank's thread.
  void shutdown();
  /// False once the background thread stopped (shutdown anywhere, stall, fatal error).
  bool running() const { return !stopped_.load(); }
  /// Why it stopped.
  std::string stop_reason() const;

  const Config& config() const { return config_; }
  const MpiContext& mpi() const { return mpi_; }
  /// A fresh "<op>.noname.<n>" name for an unnamed call.
  std::string auto_name(OpType op);

 private:
  Runtime() = default;
  Status start(const InitOptions& options);
  Status check_config_agreement();
  void loop();
  void stop(const Status& why);
  bool take_entry(const std::string& name, TensorEntry* out);

  Config config_;
  MpiContext mpi_;
  std::unique_ptr<ControlPlane> control_;
  std::unique_ptr<DataPlane> data_;
  std::unique_ptr<Controller> controller_;
  std::unique_ptr<Executor> executor_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<std::string, TensorEntry> table_;  // guarded by mu_
  std::vector<Request> new_requests_;                   // guarded by mu_
  bool shutdown_requested_ = false;                     // guarded by mu_
  Status stop_status_;                                  // guarded by mu_
  std::atomic<bool> stopped_{false};
  std::atomic<uint64_t> noname_counter_[4] = {};
  std::thread thread_;
};

}  // namespace hvd
