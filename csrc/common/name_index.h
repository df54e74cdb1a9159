// Copyright horovod_cpp authors. A flat map from tensor names to small integers.
//
// The runtime looks every submitted tensor's name up several times (the table of pending
// tensors, the response cache). With a thousand tiny tensors per step, std::unordered_map's
// scattered nodes (a likely cache miss per lookup, a node per insert) and its modulo by a
// prime cost about a tenth of a tensor's time (docs/benchmarks-history.md, workload d). This index
// keeps its entries in one array, probed linearly from the name's hash, comparing the hash
// before the name; an erase shifts the entries after it back (no tombstones), so probes stay
// short however many names come and go.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hvd {

class NameIndex {
 public:
  /// What find() returns for a name that is not in the index.
  static constexpr uint32_t kNone = UINT32_MAX;

  /// The value stored under `name`, or kNone.
  uint32_t find(const std::string& name) const;
  /// Stores `value` under `name`; false, changing nothing, if `name` is already present.
  bool insert(const std::string& name, uint32_t value);
  /// Removes `name`, returning the value it had, or kNone if it was not present.
  uint32_t erase(const std::string& name);
  /// Removes every entry (the array keeps its room).
  void clear();
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  /// Calls f(name, value) for every entry, in no particular order. `f` must not change the
  /// index.
  template <typename F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_) {
      if (s.hash != 0) f(s.name, s.value);
    }
  }

 private:
  struct Slot {
    uint64_t hash = 0;  // 0: empty
    uint32_t value = 0;
    std::string name;  // kept when the slot empties: the next name reuses its room
  };
  static uint64_t hash_of(const std::string& name);  // never 0
  /// The slot holding `name`, or the empty slot where it would go (slots_ not empty).
  size_t locate(const std::string& name, uint64_t hash) const;
  void grow();

  std::vector<Slot> slots_;  // a power of two of them, at most half full; or none
  size_t size_ = 0;
};

}  // namespace hvd
