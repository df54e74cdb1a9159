// Copyright horovod_cpp authors.
#include "common/name_index.h"

#include <algorithm>
#include <functional>
#include <utility>

namespace hvd {

uint64_t NameIndex::hash_of(const std::string& name) {
  const uint64_t h = std::hash<std::string>{}(name);
  return h != 0 ? h : 1;
}

size_t NameIndex::locate(const std::string& name, uint64_t hash) const {
  const size_t mask = slots_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.hash == 0 || (s.hash == hash && s.name == name)) return i;
  }
}

uint32_t NameIndex::find(const std::string& name) const {
  if (size_ == 0) return kNone;
  const Slot& s = slots_[locate(name, hash_of(name))];
  return s.hash != 0 ? s.value : kNone;
}

bool NameIndex::insert(const std::string& name, uint32_t value) {
  if ((size_ + 1) * 2 > slots_.size()) grow();
  const uint64_t h = hash_of(name);
  Slot& s = slots_[locate(name, h)];
  if (s.hash != 0) return false;
  s.hash = h;
  s.value = value;
  s.name = name;
  ++size_;
  return true;
}

uint32_t NameIndex::erase(const std::string& name) {
  if (size_ == 0) return kNone;
  const size_t mask = slots_.size() - 1;
  size_t hole = locate(name, hash_of(name));
  if (slots_[hole].hash == 0) return kNone;
  const uint32_t value = slots_[hole].value;
  // Backward shift: an entry after the hole moves into it unless its home slot lies
  // cyclically in (hole, j], where a probe from its home still reaches it without the hole.
  for (size_t j = (hole + 1) & mask; slots_[j].hash != 0; j = (j + 1) & mask) {
    const size_t home = slots_[j].hash & mask;
    const bool reachable = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (reachable) continue;
    slots_[hole].hash = slots_[j].hash;
    slots_[hole].value = slots_[j].value;
    std::swap(slots_[hole].name, slots_[j].name);
    hole = j;
  }
  slots_[hole].hash = 0;
  --size_;
  return value;
}

void NameIndex::clear() {
  for (Slot& s : slots_) s.hash = 0;
  size_ = 0;
}

void NameIndex::grow() {
  std::vector<Slot> old(std::max<size_t>(16, slots_.size() * 2));
  old.swap(slots_);
  const size_t mask = slots_.size() - 1;
  for (Slot& s : old) {
    if (s.hash == 0) continue;
    size_t i = s.hash & mask;
    while (slots_[i].hash != 0) i = (i + 1) & mask;
    slots_[i] = std::move(s);
  }
}

}  // namespace hvd
