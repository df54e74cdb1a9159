// Copyright horovod_cpp authors. Public API: the shape of a tensor.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace hvd {

/// The shape of a tensor: one extent per dimension; empty for a scalar.
///
/// A vector of int64_t (the subset of std::vector's interface that shapes need, and implicit
/// conversions from and to std::vector<int64_t>) that keeps up to kInline extents in place.
/// Every tensor handed to a collective carries a shape, and a heap allocation per shape was
/// the largest single cost of submitting a tiny tensor (docs/benchmarks-history.md, round
/// fourteen): views of tensors of up to four dimensions now copy and move without one.
class Shape {
 public:
  using value_type = int64_t;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = int64_t&;
  using const_reference = const int64_t&;
  using pointer = int64_t*;
  using const_pointer = const int64_t*;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  /// Extents kept without a heap allocation.
  static constexpr size_t kInline = 4;

  Shape() noexcept {}
  Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.end()); }
  /// `n` extents, each `value`.
  explicit Shape(size_t n, int64_t value = 0) { assign(n, value); }
  /// The extents in [first, last).
  template <typename It, typename = std::enable_if_t<!std::is_integral<It>::value>>
  Shape(It first, It last) {
    assign(first, last);
  }
  /// From a std::vector<int64_t> (implicit: shapes were vectors before).
  Shape(const std::vector<int64_t>& dims) { assign(dims.begin(), dims.end()); }  // NOLINT
  Shape(const Shape& other) { assign(other.begin(), other.end()); }
  Shape(Shape&& other) noexcept { take(other); }
  ~Shape() { release(); }

  Shape& operator=(const Shape& other) {
    if (this != &other) assign(other.begin(), other.end());
    return *this;
  }
  Shape& operator=(Shape&& other) noexcept {
    if (this != &other) {
      release();
      take(other);
    }
    return *this;
  }
  Shape& operator=(std::initializer_list<int64_t> dims) {
    assign(dims.begin(), dims.end());
    return *this;
  }
  /// A std::vector<int64_t> with the same extents (implicit: shapes were vectors before).
  operator std::vector<int64_t>() const { return std::vector<int64_t>(begin(), end()); }  // NOLINT
  /// The same, explicitly.
  std::vector<int64_t> vec() const { return std::vector<int64_t>(begin(), end()); }

  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  size_t capacity() const noexcept { return cap_; }
  int64_t* data() noexcept { return on_heap() ? heap_ : inline_; }
  const int64_t* data() const noexcept { return on_heap() ? heap_ : inline_; }

  iterator begin() noexcept { return data(); }
  iterator end() noexcept { return data() + size_; }
  const_iterator begin() const noexcept { return data(); }
  const_iterator end() const noexcept { return data() + size_; }
  const_iterator cbegin() const noexcept { return begin(); }
  const_iterator cend() const noexcept { return end(); }
  reverse_iterator rbegin() noexcept { return reverse_iterator(end()); }
  reverse_iterator rend() noexcept { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const noexcept { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const noexcept { return const_reverse_iterator(begin()); }

  int64_t& operator[](size_t i) noexcept { return data()[i]; }
  const int64_t& operator[](size_t i) const noexcept { return data()[i]; }
  /// Bounds-checked element access (std::out_of_range).
  int64_t& at(size_t i) {
    if (i >= size_) throw std::out_of_range("hvd::Shape::at: index out of range");
    return data()[i];
  }
  const int64_t& at(size_t i) const {
    if (i >= size_) throw std::out_of_range("hvd::Shape::at: index out of range");
    return data()[i];
  }
  int64_t& front() noexcept { return data()[0]; }
  const int64_t& front() const noexcept { return data()[0]; }
  int64_t& back() noexcept { return data()[size_ - 1]; }
  const int64_t& back() const noexcept { return data()[size_ - 1]; }

  void clear() noexcept { size_ = 0; }
  void reserve(size_t n) {
    if (n > cap_) grow(n);
  }
  void push_back(int64_t d) {
    if (size_ == cap_) grow(cap_ * 2);
    data()[size_++] = d;
  }
  int64_t& emplace_back(int64_t d) {
    push_back(d);
    return back();
  }
  void pop_back() noexcept { --size_; }
  void resize(size_t n, int64_t value = 0) {
    reserve(n);
    int64_t* p = data();
    for (size_t i = size_; i < n; ++i) p[i] = value;
    size_ = static_cast<uint32_t>(n);
  }
  /// Replaces the extents with those in [first, last).
  template <typename It, typename = std::enable_if_t<!std::is_integral<It>::value>>
  void assign(It first, It last) {
    const size_t n = static_cast<size_t>(std::distance(first, last));
    if (n > cap_) grow(n, /*keep=*/false);
    std::copy(first, last, data());
    size_ = static_cast<uint32_t>(n);
  }
  /// Replaces the extents with `n` copies of `value`.
  void assign(size_t n, int64_t value) {
    if (n > cap_) grow(n, /*keep=*/false);
    std::fill_n(data(), n, value);
    size_ = static_cast<uint32_t>(n);
  }
  /// Inserts `d` before `pos`; returns where it went.
  iterator insert(const_iterator pos, int64_t d) {
    const size_t at = static_cast<size_t>(pos - begin());
    push_back(d);
    std::rotate(begin() + at, end() - 1, end());
    return begin() + at;
  }
  /// Inserts [first, last) before `pos`; returns where the first went.
  template <typename It, typename = std::enable_if_t<!std::is_integral<It>::value>>
  iterator insert(const_iterator pos, It first, It last) {
    const size_t at = static_cast<size_t>(pos - begin());
    const size_t old = size_;
    for (; first != last; ++first) push_back(*first);
    std::rotate(begin() + at, begin() + old, end());
    return begin() + at;
  }
  /// Removes the extent at `pos`; returns what follows it.
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  /// Removes [first, last); returns what follows them.
  iterator erase(const_iterator first, const_iterator last) {
    const size_t at = static_cast<size_t>(first - begin());
    const size_t gone = static_cast<size_t>(last - first);
    std::copy(begin() + at + gone, end(), begin() + at);
    size_ -= static_cast<uint32_t>(gone);
    return begin() + at;
  }
  void swap(Shape& other) noexcept {
    Shape t(std::move(other));
    other = std::move(*this);
    *this = std::move(t);
  }

  friend bool operator==(const Shape& a, const Shape& b) noexcept {
    if (a.size_ != b.size_) return false;
    const int64_t* x = a.data();
    const int64_t* y = b.data();
    for (size_t i = 0; i < a.size_; ++i) {
      if (x[i] != y[i]) return false;
    }
    return true;
  }
  friend bool operator!=(const Shape& a, const Shape& b) noexcept { return !(a == b); }
  /// Lexicographic, like std::vector's.
  friend bool operator<(const Shape& a, const Shape& b) noexcept {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  bool on_heap() const noexcept { return cap_ > kInline; }
  void release() noexcept {
    if (on_heap()) delete[] heap_;
  }
  // Steals `o`'s extents (this holds nothing); leaves `o` empty and inline.
  void take(Shape& o) noexcept {
    size_ = o.size_;
    cap_ = o.cap_;
    if (o.on_heap()) {
      heap_ = o.heap_;
    } else {
      std::memcpy(inline_, o.inline_, sizeof(inline_));
    }
    o.size_ = 0;
    o.cap_ = kInline;
  }
  // Room for at least `n` extents, keeping the current ones if `keep`.
  void grow(size_t n, bool keep = true) {
    if (n > UINT32_MAX) throw std::length_error("hvd::Shape: too many dimensions");
    const size_t cap = std::max<size_t>(n, kInline * 2);
    int64_t* p = new int64_t[cap];
    if (keep) std::copy(begin(), end(), p);
    release();
    heap_ = p;
    cap_ = static_cast<uint32_t>(cap);
  }

  uint32_t size_ = 0;
  uint32_t cap_ = kInline;
  union {
    int64_t inline_[kInline] = {};
    int64_t* heap_;
  };
};

inline void swap(Shape& a, Shape& b) noexcept {
  a.swap(b);
}

}  // namespace hvd
