// Copyright horovod_cpp authors. The response cache: names replaced by bit positions.
//
// Every rank holds an identical cache: entries are only added, touched and removed while
// processing the same responses and the same bit vectors in the same order on every rank.
// So a bit position means the same tensor (and the same parameters) everywhere, and in steady
// state a rank announces "these tensors are ready" with one bit each instead of a request.
// Eviction is least-recently-used; freed positions are reused lowest first, which keeps the
// bit vector as short as the number of live entries allows.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/name_index.h"
#include "coordination/message.h"

namespace hvd {

class ResponseCache {
 public:
  explicit ResponseCache(uint32_t capacity) : capacity_(capacity) {}

  uint32_t capacity() const { return capacity_; }
  bool enabled() const { return capacity_ > 0; }
  uint32_t size() const { return static_cast<uint32_t>(by_name_.size()); }
  /// One more than the highest position in use (0 when empty): the bit vector length.
  uint32_t num_bits() const { return used_.empty() ? 0 : *used_.rbegin() + 1; }

  /// The position of `name`, if cached.
  std::optional<uint32_t> find(const std::string& name) const;
  bool has_bit(uint32_t bit) const { return bit < slots_.size() && slots_[bit].live; }
  /// The response at `bit` (which must be live).
  const Response& at(uint32_t bit) const { return slots_[bit].response; }

  /// Adds `response` (a successful one) or replaces the entry of the same name, and marks it
  /// most recently used; the stored copy gets a new Response::cache_stamp. When the cache is
  /// full the least recently used entry is evicted first and its position is returned in
  /// `evicted`.
  uint32_t put(const Response& response, std::optional<uint32_t>* evicted);
  /// Marks `bit` most recently used.
  void touch(uint32_t bit);
  /// Removes the entry at `bit`.
  void erase(uint32_t bit);

 private:
  struct Slot {
    bool live = false;
    Response response;
    std::list<uint32_t>::iterator lru_pos;
  };
  uint32_t capacity_;
  std::vector<Slot> slots_;
  NameIndex by_name_;
  std::list<uint32_t> lru_;  // front = most recently used
  std::set<uint32_t> used_;
  std::set<uint32_t> free_;
  uint64_t stamps_ = 0;  // the last Response::cache_stamp given out
};

}  // namespace hvd
