// Copyright horovod_cpp authors.
#include "core/process_set.h"

#include <algorithm>

namespace hvd {

std::shared_ptr<ProcessSetState> ProcessSetState::create(int id, std::vector<int> global_ranks,
                                                         int my_global_rank,
                                                         std::unique_ptr<SetPlanes> planes,
                                                         const Config& config, Timeline* timeline) {
  auto set = std::make_shared<ProcessSetState>(id, std::move(global_ranks), my_global_rank,
                                               std::move(planes), config, timeline);
  set->self_ = set;
  return set;
}

int ProcessSetState::index_of(const std::vector<int>& ranks, int global_rank) {
  return static_cast<int>(std::find(ranks.begin(), ranks.end(), global_rank) - ranks.begin());
}

ProcessSetState::ProcessSetState(int id, std::vector<int> global_ranks, int my_global_rank,
                                 std::unique_ptr<SetPlanes> planes, const Config& config,
                                 Timeline* timeline)
    : id_(id),
      global_ranks_(std::move(global_ranks)),
      rank_(index_of(global_ranks_, my_global_rank)),
      planes_(std::move(planes)),
      table_(rank_, my_global_rank),
      cycle_(id_, global_ranks_, rank_, planes_.get(), &table_, config, timeline),
      scheduler_(&table_, &cycle_) {
  scheduler_.start();
}

// The thread stops first; then the cycle's transports finish what they still run (GPU work
// completes its handles), and the planes release their communicators (members' order).
ProcessSetState::~ProcessSetState() {
  shutdown();
}

}  // namespace hvd
