// Copyright horovod_cpp authors. An in-process DataPlane and the harness that runs whole
// process sets (background loop, negotiation, fusion, executor, transports) as N threads.
//
// InProcessDataPlane moves and reduces bytes among the ranks of an InProcessHub (the same hub
// the control plane uses, but a hub of its own: a communicator of its own). Wrapped in a
// CpuTransport, it is the "mpi" transport's twin, so the fusion buffer, scaling, joined zeros
// and result allocation run exactly as in the library. InProcessSets builds N ProcessSetStates
// on such planes; each rank's calls come from the test's threads, as users' would.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "transport/cpu/cpu_transport.h"
#include "transport/data_plane.h"
#include "transport/transport_context.h"
#include "transport/world.h"
#include "core/process_set.h"
#include "in_process_bootstrap.h"
#include "in_process_control_plane.h"

namespace hvd {
namespace testing {

class InProcessDataPlane : public DataPlane {
 public:
  InProcessDataPlane(InProcessHub* hub, int rank) : hub_(hub), rank_(rank) {}
  const char* name() const override { return "inproc"; }
  Status allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op) override;
  Status allgatherv(const void* in, void* out, const std::vector<int64_t>& bytes_per_rank) override;
  Status alltoallv(const void* in, const std::vector<int64_t>& send_bytes, void* out,
                   const std::vector<int64_t>& recv_bytes) override;
  Status reducescatter(const void* in, void* out, const std::vector<int64_t>& recv_counts,
                       DataType dtype, ReduceOp op) override;
  Status broadcast(void* buf, int64_t bytes, int root) override;
  Status barrier() override;

  /// Allreduce calls so far (read after the set's thread stopped).
  uint64_t allreduces() const { return allreduces_; }
  /// Calls of every collective so far (read after the set's thread stopped).
  uint64_t calls() const { return calls_; }
  /// The thread that ran the last allreduce (read after its handle completed).
  std::thread::id last_allreduce_thread() const { return last_thread_; }
  /// Makes the `n`-th allreduce (counted from 1; 0: never) fail on this rank with `why`.
  void fail_allreduce(uint64_t n, std::string why) {
    fail_at_ = n;
    fail_why_ = std::move(why);
  }
  /// Makes the `n`-th allreduce (counted from 1; 0: never) throw std::bad_alloc on this rank,
  /// as an allocation in a transport would.
  void throw_bad_alloc_at(uint64_t n) { throw_at_ = n; }
  /// Makes this plane's failures fatal, as MPI's are.
  void set_failures_fatal(bool fatal) { fatal_ = fatal; }
  bool failures_are_fatal() const override { return fatal_; }

 private:
  InProcessHub* hub_;
  int rank_;
  uint64_t allreduces_ = 0;
  uint64_t calls_ = 0;
  std::thread::id last_thread_;
  uint64_t fail_at_ = 0;
  uint64_t throw_at_ = 0;
  bool fatal_ = false;
  std::string fail_why_;
};

/// A transport that takes only what `take` accepts and runs it on `inner` (registry order).
class FilteredTransport : public Transport {
 public:
  FilteredTransport(std::unique_ptr<Transport> inner, const char* name,
                    std::function<bool(const Batch&)> take)
      : inner_(std::move(inner)), name_(name), take_(std::move(take)) {}
  const char* name() const override { return name_; }
  bool accepts(const Batch& b) const override { return take_(b); }
  void run(Batch& b) override { inner_->run(b); }

 private:
  std::unique_ptr<Transport> inner_;
  const char* name_;
  std::function<bool(const Batch&)> take_;
};

/// Adds a rank's transports for a set to `registry` from the set's context, as
/// register_transports() does in the library (transport/factory/transports.cc).
using TransportMaker = std::function<void(const TransportContext& ctx, TransportRegistry* registry)>;

/// N process sets (one per simulated rank) over in-process planes, running their background
/// threads. `small_first` adds, before the in-process "inproc" transport, a second one
/// ("small", its own hub) that takes only allreduces under `small_bytes`, to test the
/// registry's order.
class InProcessSets {
 public:
  InProcessSets(int n, const Config& config, bool small_first = false, int64_t small_bytes = 0);
  /// The sets are built as the library's World builds them, on n threads at once over an
  /// in-process Bootstrap: `maker`'s transports first, then "inproc"; the shared-memory
  /// control plane over the in-process one when `config` asks for it (shm_enabled and
  /// shm_control), as transport/factory/mpi_world.cc does. Throws when a rank fails.
  InProcessSets(int n, const Config& config, const TransportMaker& maker);
  ~InProcessSets();  ///< shuts every rank down

  int size() const { return n_; }
  ProcessSetState& set(int rank) { return *sets_[static_cast<size_t>(rank)]; }
  /// The same, shared: a handle's cycle driver (detail::CycleDriver) holds it weakly.
  std::shared_ptr<ProcessSetState> shared(int rank) { return sets_[static_cast<size_t>(rank)]; }
  InProcessDataPlane& data(int rank) { return *data_[static_cast<size_t>(rank)]; }
  InProcessDataPlane& small(int rank) { return *small_[static_cast<size_t>(rank)]; }
  InProcessControlPlane& control(int rank) { return *control_[static_cast<size_t>(rank)]; }
  /// Stops every rank's thread (collectively), keeping the planes for inspection.
  void shutdown();

 private:
  /// Rank r's in-process control plane (recorded for control()).
  std::unique_ptr<ControlPlane> new_control(int r);
  /// Appends rank r's "inproc" transport (recorded for data()) to `registry`.
  void add_inproc(int r, TransportRegistry* registry);

  int n_;
  InProcessHub control_hub_, data_hub_, small_hub_;
  std::vector<std::unique_ptr<InProcessBootstrap>> bootstraps_;  // outlive the sets
  std::vector<InProcessControlPlane*> control_;
  std::vector<InProcessDataPlane*> data_, small_;
  std::vector<std::shared_ptr<ProcessSetState>> sets_;
};

/// Runs `body(rank)` on n threads and returns the first failure (exceptions included), or "".
std::string on_ranks(int n, const std::function<void(int rank)>& body);

}  // namespace testing
}  // namespace hvd
