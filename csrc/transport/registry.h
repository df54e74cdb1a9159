// Copyright horovod_cpp authors. The ordered list of a process set's transports.
//
// Built once per process set (transport/factory/transports.cc lists them; tests build their own), then
// read-only: select() is called from the set's background thread, check_device() from user
// threads. The first transport that accepts a batch runs it: for CPU tensors shared memory
// (when usable and the batch large enough), then MPI; for CUDA tensors NCCL.
#pragma once

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace hvd {

class TransportRegistry {
 public:
  /// Appends `t` (tried after those added before); ignores null (an unavailable transport).
  void add(std::unique_ptr<Transport> t);
  /// The first transport that accepts `batch`, or null. Logs each transport's first use.
  Transport* select(const Batch& batch) const;
  /// OK when some transport claims `device` and finds it usable; otherwise why not.
  Status check_device(const Device& device, const std::string& what) const;
  /// drain() on every transport (shutdown).
  void drain();
  /// The OR of every transport's path_votes(), and set_agreed_paths() on every transport (the
  /// transports that vote own disjoint bits: today only shm votes).
  uint64_t path_votes();
  void set_agreed_paths(uint64_t votes);
  /// The transports' names in order, e.g. "shm, mpi, nccl".
  std::string describe() const;
  bool empty() const { return transports_.empty(); }

 private:
  std::vector<std::unique_ptr<Transport>> transports_;
  mutable std::mutex logged_mu_;
  mutable std::set<const Transport*> logged_;  // guarded by logged_mu_
};

}  // namespace hvd
