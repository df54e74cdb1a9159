// Copyright horovod_cpp authors. The parking of buffers whose collectives are still in flight.
#include "training/in_flight.h"

#include <list>
#include <mutex>

namespace hvd {
namespace detail {
namespace {

struct Parked {
  std::vector<Handle> handles;
  std::shared_ptr<void> owner;
  bool finished() const {
    for (const Handle& h : handles) {
      if (h.valid() && !h.poll()) return false;
    }
    return true;
  }
};

struct Lot {
  std::mutex mu;
  std::list<Parked> entries;
};

// Never destroyed: an entry still pending at exit must not be freed by a static destructor
// while a collective may write into it.
Lot& lot() {
  static Lot* l = new Lot();
  return *l;
}

}  // namespace

void park(std::vector<Handle> handles, std::shared_ptr<void> owner) {
  Parked p{std::move(handles), std::move(owner)};
  Lot& l = lot();
  // Released outside the lock: an owner's destructor may be arbitrary framework code.
  std::list<Parked> done;
  {
    std::lock_guard<std::mutex> lk(l.mu);
    for (auto it = l.entries.begin(); it != l.entries.end();) {
      auto next = std::next(it);
      if (it->finished()) done.splice(done.end(), l.entries, it);
      it = next;
    }
    if (!p.finished()) l.entries.push_back(std::move(p));
  }
}

size_t parked_pending() {
  Lot& l = lot();
  std::list<Parked> done;
  std::lock_guard<std::mutex> lk(l.mu);
  size_t n = 0;
  for (auto it = l.entries.begin(); it != l.entries.end();) {
    auto next = std::next(it);
    if (it->finished()) {
      done.splice(done.end(), l.entries, it);
    } else {
      ++n;
    }
    it = next;
  }
  return n;
}

}  // namespace detail
}  // namespace hvd
