// Copyright horovod_cpp authors. State: commit and the reset callbacks, common to every state.
#include "horovod_cpp/elastic.h"

namespace hvd {
namespace elastic {

State::~State() = default;

void State::commit() {
  save();
  check_host_updates();
}

void State::check_host_updates() {
  // hosts_updated() is rank 0's answer on every rank: all ranks throw, or none.
  if (hosts_updated()) throw HostsUpdatedInterrupt();
}

void State::register_reset_callbacks(std::function<void()> callback) {
  reset_callbacks_.push_back(std::move(callback));
}

void State::on_reset() {
  for (auto& cb : reset_callbacks_) cb();
}

}  // namespace elastic
}  // namespace hvd
