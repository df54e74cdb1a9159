// Copyright horovod_cpp authors. The Runtime: the one object that owns everything.
//
// Made by hvd::init() and destroyed by hvd::shutdown(). It owns the configuration, the World
// (transport/world.h: the job's communication layer, MPI; it builds each set's planes) and the
// process sets (set 0 = every rank), each with its own background thread.
// Process sets are added and removed collectively, from user threads, one at a time under
// `collective_mu_`; `sets_mu_` guards the maps only and is never held across a collective call.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/world.h"
#include "common/config.h"
#include "core/process_set.h"
#include "horovod_cpp/options.h"

namespace hvd {

class Timeline;

class Runtime {
 public:
  /// Initializes MPI, creates the global set and the sets of `options`.
  static Status create(const InitOptions& options, std::unique_ptr<Runtime>* out);
  ~Runtime();

  /// The set with `id` if this rank belongs to it; a clear error otherwise.
  Status find_set(int id, std::shared_ptr<ProcessSetState>* out) const;
  /// Set 0 (every rank), without a reference count: valid while this runtime lives.
  ProcessSetState* global_set() const { return global_set_.get(); }
  /// Collective over every rank, in the same order everywhere.
  Status add_process_set(std::vector<int> ranks, int* id);
  Status remove_process_set(int id);
  /// Members of set `id` (global ranks); empty if no such set.
  std::vector<int> process_set_ranks(int id) const;
  /// Collective over every rank (horovod_cpp/elastic.h): World::elastic_hosts_updated, one
  /// world exchange at a time as for the sets.
  Status elastic_hosts_updated(bool* updated);

  /// Stops every set (pending operations fail with a ShutdownError) and waits for them.
  void shutdown();
  /// False once the global set stopped (shutdown on some rank, stall, fatal error).
  bool running() const;

  const Config& config() const { return config_; }
  const World& world() const { return *world_; }
  Timeline* timeline() { return timeline_.get(); }

 private:
  Runtime();
  Status start(const InitOptions& options);
  Status check_version_agreement();
  Status check_config_agreement(const Status& timeline);
  Status create_set(std::vector<int> ranks, int id);

  Config config_;
  std::unique_ptr<World> world_;
  /// Set by start() once an elastic driver's membership connected (its generation): a later
  /// failure of start() there is a lost member, which create() answers by joining the next.
  bool joined_elastic_ = false;
  int64_t elastic_generation_ = 0;
  std::unique_ptr<Timeline> timeline_;
  std::mutex collective_mu_;    // serializes the world's collectives (sets, hosts_updated)
  mutable std::mutex sets_mu_;  // never held across MPI calls
  std::map<int, std::shared_ptr<ProcessSetState>> sets_;  // guarded by sets_mu_; member sets only
  /// sets_[0], set in start() before the runtime is published and never changed: find_set(0)
  /// (every collective on the global set) takes it without sets_mu_. After shutdown() it is
  /// a stopped set, whose enqueue() fails.
  std::shared_ptr<ProcessSetState> global_set_;
  std::map<int, std::vector<int>> set_ranks_;        // guarded by sets_mu_; every set
  int next_set_id_ = 0;                              // guarded by collective_mu_
};

}  // namespace hvd
