// Copyright horovod_cpp authors. The per-thread block lists behind make_pooled.
#include <atomic>
#include <catch2/catch.hpp>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "common/block_pool.h"

namespace {

std::atomic<int> g_alive{0};

// An object the size of a handle's state, counting its lives.
struct Counted {
  explicit Counted(int v) : value(v) { ++g_alive; }
  ~Counted() { --g_alive; }
  int value;
  char pad[200] = {};
};

// The list make_pooled<Counted> draws from: the control block and the object in one block.
using List = hvd::detail::BlockList<sizeof(
    std::_Sp_counted_ptr_inplace<Counted, hvd::PooledAllocator<Counted>, __gnu_cxx::_S_atomic>)>;

}  // namespace

#ifndef HVD_BLOCK_POOL_BYPASS

TEST_CASE("make_pooled reuses this thread's freed blocks, last freed first", "[block_pool]") {
  g_alive = 0;
  const size_t before = List::mine().size();
  std::vector<std::shared_ptr<Counted>> held;
  for (int i = 0; i < 100; ++i) held.push_back(hvd::make_pooled<Counted>(i));
  CHECK(g_alive == 100);
  for (int i = 0; i < 100; ++i) CHECK(held[static_cast<size_t>(i)]->value == i);
  std::set<const void*> blocks;
  for (const auto& p : held) blocks.insert(p.get());
  CHECK(blocks.size() == 100);
  const void* last = held.back().get();
  held.clear();
  CHECK(g_alive == 0);  // every destructor ran once
  CHECK(List::mine().size() == before + 100);
  auto again = hvd::make_pooled<Counted>(7);
  CHECK(again.get() == last);  // the block freed last comes back first
  CHECK(again->value == 7);
  CHECK(List::mine().size() == before + 99);
  // A copy of the pointer keeps the object: the block returns only with the last one.
  auto copy = again;
  again.reset();
  CHECK(g_alive == 1);
  CHECK(List::mine().size() == before + 99);
  copy.reset();
  CHECK(g_alive == 0);
  CHECK(List::mine().size() == before + 100);
}

TEST_CASE("a block freed by another thread joins that thread's list", "[block_pool]") {
  g_alive = 0;
  auto p = hvd::make_pooled<Counted>(1);
  const void* block = p.get();
  const void* reused = nullptr;
  size_t their_before = 0, their_after = 0;
  std::thread t([&] {
    their_before = List::mine().size();
    p.reset();  // the last reference dies here
    their_after = List::mine().size();
    auto q = hvd::make_pooled<Counted>(2);
    reused = q.get();
  });
  t.join();
  CHECK(g_alive == 0);
  CHECK(their_after == their_before + 1);
  CHECK(reused == block);
}

TEST_CASE("a thread keeps at most kBlockPoolDepth blocks; the rest go to the heap",
          "[block_pool]") {
  std::thread t([] {
    std::vector<std::shared_ptr<Counted>> held;
    for (size_t i = 0; i < hvd::kBlockPoolDepth + 50; ++i) {
      held.push_back(hvd::make_pooled<Counted>(static_cast<int>(i)));
    }
    held.clear();
    CHECK(List::mine().size() == hvd::kBlockPoolDepth);
  });
  t.join();
  CHECK(g_alive == 0);
}

#else

TEST_CASE("make_pooled under AddressSanitizer allocates from the heap", "[block_pool]") {
  g_alive = 0;
  {
    auto p = hvd::make_pooled<Counted>(3);
    CHECK(p->value == 3);
  }
  CHECK(g_alive == 0);
  CHECK(List::mine().size() == 0);
}

#endif
