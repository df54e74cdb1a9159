// Copyright horovod_cpp authors.
#include "transport/registry.h"

#include "common/logging.h"

namespace hvd {

void TransportRegistry::add(std::unique_ptr<Transport> t) {
  if (t) transports_.push_back(std::move(t));
}

Transport* TransportRegistry::select(const Batch& batch) const {
  for (const auto& t : transports_) {
    if (!t->accepts(batch)) continue;
    std::lock_guard<std::mutex> lk(logged_mu_);
    if (logged_.insert(t.get()).second) {
      HVD_LOG(kDebug) << "transport " << t->name() << " runs " << batch.describe() << " ("
                      << batch.device.str() << ", " << batch.bytes << " bytes) and its like";
    }
    return t.get();
  }
  return nullptr;
}

Status TransportRegistry::check_device(const Device& device, const std::string& what) const {
  for (const auto& t : transports_) {
    if (t->claims_device(device)) return t->check_device(device, what);
  }
  return Status::InvalidArgument(what + ": no transport of this build takes tensors on " +
                                 device.str() + " (transports: " + describe() + ")");
}

void TransportRegistry::drain() {
  for (auto& t : transports_) t->drain();
}

uint64_t TransportRegistry::path_votes() {
  uint64_t v = 0;
  for (auto& t : transports_) v |= t->path_votes();
  return v;
}

void TransportRegistry::set_agreed_paths(uint64_t votes) {
  for (auto& t : transports_) t->set_agreed_paths(votes);
}

std::string TransportRegistry::describe() const {
  std::string s;
  for (const auto& t : transports_) s += (s.empty() ? "" : ", ") + std::string(t->name());
  return s.empty() ? "none" : s;
}

}  // namespace hvd
