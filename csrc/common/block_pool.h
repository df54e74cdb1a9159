// Copyright horovod_cpp authors. Per-thread recycling of small fixed-size heap blocks.
//
// Every asynchronous collective allocates its handle's state, and a step of a thousand tiny
// tensors keeps a thousand of them alive at once. glibc keeps only seven freed blocks of a
// size per thread at hand (its tcache); the rest go through its bins, about 250 instructions
// per allocation and free together (callgrind, docs/benchmarks-history.md, workload d). A block
// given back here waits in the giving thread's own list for the next allocation of its
// size: a few instructions, no lock.
//
// A block may be given back by another thread than the one that took it (the background
// thread drops a handle the user thread made): it joins that thread's list. Each list holds
// at most kBlockPoolDepth blocks; beyond that, and when its thread ends, blocks go back to
// the global heap. Builds with AddressSanitizer bypass the lists, so a use after free is
// still caught.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <utility>

namespace hvd {

/// The most blocks one thread keeps per size.
constexpr size_t kBlockPoolDepth = 4096;

namespace detail {

#if defined(__SANITIZE_ADDRESS__)
#define HVD_BLOCK_POOL_BYPASS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HVD_BLOCK_POOL_BYPASS 1
#endif
#endif

/// The calling thread's list of free blocks of `Size` bytes.
template <size_t Size>
class BlockList {
 public:
  static_assert(Size >= sizeof(void*), "a free block holds the link to the next one");
  ~BlockList() {
    while (head_) {
      Node* next = head_->next;
      ::operator delete(head_, Size);
      head_ = next;
    }
    // A block freed later in this thread's exit (another thread-local object's last
    // reference) goes straight to the heap.
    count_ = kBlockPoolDepth;
  }
  void* take() {
    if (!head_) return ::operator new(Size);
    Node* n = head_;
    head_ = n->next;
    --count_;
    return n;
  }
  void give(void* p) {
    if (count_ >= kBlockPoolDepth) {
      ::operator delete(p, Size);
      return;
    }
    Node* n = static_cast<Node*>(p);
    n->next = head_;
    head_ = n;
    ++count_;
  }
  /// Blocks waiting in this list.
  size_t size() const { return count_; }
  static BlockList& mine() {
    thread_local BlockList list;
    return list;
  }

 private:
  struct Node {
    Node* next;
  };
  Node* head_ = nullptr;
  size_t count_ = 0;
};

}  // namespace detail

/// An allocator for std::allocate_shared whose single-object allocations come from the
/// calling thread's BlockList (arrays and odd alignments go to the heap).
template <typename T>
struct PooledAllocator {
  using value_type = T;
  PooledAllocator() = default;
  template <typename U>
  PooledAllocator(const PooledAllocator<U>&) {}  // NOLINT: allocators convert implicitly

  T* allocate(size_t n) {
#ifndef HVD_BLOCK_POOL_BYPASS
    if (n == 1 && alignof(T) <= alignof(std::max_align_t)) {
      return static_cast<T*>(detail::BlockList<sizeof(T)>::mine().take());
    }
#endif
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) {
#ifndef HVD_BLOCK_POOL_BYPASS
    if (n == 1 && alignof(T) <= alignof(std::max_align_t)) {
      detail::BlockList<sizeof(T)>::mine().give(p);
      return;
    }
#endif
    ::operator delete(p, n * sizeof(T));
  }
  template <typename U>
  bool operator==(const PooledAllocator<U>&) const {
    return true;
  }
  template <typename U>
  bool operator!=(const PooledAllocator<U>&) const {
    return false;
  }
};

/// std::make_shared, with the object and its reference counts in one pooled block.
template <typename T, typename... Args>
std::shared_ptr<T> make_pooled(Args&&... args) {
  return std::allocate_shared<T>(PooledAllocator<T>(), std::forward<Args>(args)...);
}

}  // namespace hvd
