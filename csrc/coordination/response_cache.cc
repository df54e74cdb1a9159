// Copyright horovod_cpp authors.
#include "coordination/response_cache.h"

namespace hvd {

std::optional<uint32_t> ResponseCache::find(const std::string& name) const {
  const uint32_t bit = by_name_.find(name);
  if (bit == NameIndex::kNone) return std::nullopt;
  return bit;
}

uint32_t ResponseCache::put(const Response& response, std::optional<uint32_t>* evicted) {
  evicted->reset();
  if (auto existing = find(response.name)) {
    slots_[*existing].response = response;
    slots_[*existing].response.cache_stamp = ++stamps_;
    touch(*existing);
    return *existing;
  }
  if (size() >= capacity_) {
    const uint32_t victim = lru_.back();
    erase(victim);
    *evicted = victim;
  }
  uint32_t bit;
  if (!free_.empty()) {
    bit = *free_.begin();
    free_.erase(free_.begin());
  } else {
    bit = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  Slot& s = slots_[bit];
  s.live = true;
  s.response = response;
  s.response.cache_stamp = ++stamps_;
  lru_.push_front(bit);
  s.lru_pos = lru_.begin();
  by_name_.insert(response.name, bit);  // absent: an entry of this name returned above
  used_.insert(bit);
  return bit;
}

void ResponseCache::touch(uint32_t bit) {
  Slot& s = slots_[bit];
  lru_.splice(lru_.begin(), lru_, s.lru_pos);
}

void ResponseCache::erase(uint32_t bit) {
  Slot& s = slots_[bit];
  if (!s.live) return;
  by_name_.erase(s.response.name);
  lru_.erase(s.lru_pos);
  s.live = false;
  s.response = Response();
  used_.erase(bit);
  free_.insert(bit);
}

}  // namespace hvd
