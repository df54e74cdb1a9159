// Copyright horovod_cpp authors. An in-process Bootstrap: the ranks of a group are threads of
// one process, so the real transports that set themselves up through a Bootstrap (shm, hier)
// run in the unit tests as they do under mpirun.
//
// Each exchange is one step of an InProcessHub (in_process_control_plane.h): the hub checks
// that every member makes the same call, and times out instead of hanging. A split makes new
// groups (hubs of their own); the group's data plane is an InProcessDataPlane on a hub of its
// own. Every thread shares one host (split_host() keeps the whole group); tests place ranks on
// fake hosts with HOROVOD_CPP_TEST_RANKS_PER_HOST (Config::test_ranks_per_host), as the
// multi-rank tests do.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/bootstrap.h"
#include "in_process_control_plane.h"

namespace hvd {
namespace testing {

/// What the members of one in-process group share.
struct InProcessGroup {
  InProcessGroup(int size, std::string name) : hub(size), data_hub(size), name(std::move(name)) {}
  InProcessHub hub;       ///< the Bootstrap's exchanges
  InProcessHub data_hub;  ///< the group's data plane
  const std::string name;
  std::mutex mu;  ///< guards children
  /// Groups made by split(), by id (kept as long as this group, so no member misses one).
  std::map<uint64_t, std::shared_ptr<InProcessGroup>> children;
  uint64_t next_child = 0;  ///< guarded by mu
};

/// One member of an InProcessGroup.
class InProcessBootstrap : public Bootstrap {
 public:
  InProcessBootstrap(std::shared_ptr<InProcessGroup> group, int rank)
      : group_(std::move(group)), rank_(rank) {}
  /// One Bootstrap per member of a new group of `size` named `name` (member r at index r).
  static std::vector<std::unique_ptr<InProcessBootstrap>> group_of(int size, const std::string& name);

  int rank() const override { return rank_; }
  int size() const override { return group_->hub.size(); }
  const std::string& name() const override { return group_->name; }
  Status allgather(const void* mine, size_t bytes, void* all) override;
  Status broadcast(void* buf, size_t bytes, int root) override;
  Status barrier() override;
  Status split(int color, int key, std::unique_ptr<Bootstrap>* out) override;
  /// The whole group: every thread shares this process's memory.
  Status split_host(std::unique_ptr<Bootstrap>* out) override { return split(0, rank_, out); }
  Status make_data_plane(std::unique_ptr<DataPlane>* out) override;

 private:
  /// One hub step named `kind` (prefixed with the group's name in errors).
  Status step(const std::string& kind, std::string payload,
              const std::function<Status(std::vector<std::string>& in,
                                         std::vector<std::string>* out)>& combine,
              std::string* result);

  std::shared_ptr<InProcessGroup> group_;
  int rank_;
};

}  // namespace testing
}  // namespace hvd
