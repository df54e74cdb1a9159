// Copyright horovod_cpp authors. hvd::Shape: a vector of extents kept in place up to kInline.
#include <catch2/catch.hpp>
#include <cstdint>
#include <utility>
#include <vector>

#include "horovod_cpp/tensor.h"

using hvd::Shape;

namespace {
// The extents as a std::vector, element by element (not through Shape's own conversion).
std::vector<int64_t> dims_of(const Shape& s) {
  std::vector<int64_t> v;
  for (size_t i = 0; i < s.size(); ++i) v.push_back(s[i]);
  return v;
}
// A shape of `n` extents 10, 11, ...
Shape counting(size_t n) {
  Shape s;
  for (size_t i = 0; i < n; ++i) s.push_back(static_cast<int64_t>(10 + i));
  return s;
}
std::vector<int64_t> counting_vec(size_t n) {
  std::vector<int64_t> v;
  for (size_t i = 0; i < n; ++i) v.push_back(static_cast<int64_t>(10 + i));
  return v;
}
}  // namespace

TEST_CASE("shape: up to kInline extents live in place, more on the heap; both behave alike",
          "[shape]") {
  for (size_t n = 0; n <= 3 * Shape::kInline; ++n) {
    INFO("extents: " << n);
    Shape s = counting(n);
    CHECK(s.size() == n);
    CHECK(s.empty() == (n == 0));
    CHECK(dims_of(s) == counting_vec(n));
    CHECK(s.capacity() >= n);
    CHECK((s.capacity() == Shape::kInline) == (n <= Shape::kInline));  // no heap until needed
    // Copies are equal and independent.
    Shape c = s;
    CHECK(c == s);
    if (n > 0) {
      c[n - 1] = -1;
      CHECK(c != s);
      CHECK(s[n - 1] == static_cast<int64_t>(10 + n - 1));
    }
    // A move takes the extents and leaves the source empty and usable.
    Shape m = std::move(s);
    CHECK(dims_of(m) == counting_vec(n));
    CHECK(s.empty());  // NOLINT(bugprone-use-after-move): documented state
    s.push_back(7);
    CHECK(dims_of(s) == std::vector<int64_t>{7});
    // Assignments between every pair of sizes (in place <-> heap both ways).
    for (size_t k = 0; k <= 3 * Shape::kInline; k += 3) {
      Shape a = counting(k);
      a = m;
      CHECK(dims_of(a) == counting_vec(n));
      Shape b = counting(k);
      b = std::move(a);
      CHECK(dims_of(b) == counting_vec(n));
      Shape x = counting(k), y = counting(n);
      x.swap(y);
      CHECK(dims_of(x) == counting_vec(n));
      CHECK(dims_of(y) == counting_vec(k));
    }
  }
}

TEST_CASE("shape: the std::vector interface shapes use, and conversions from and to vectors",
          "[shape]") {
  Shape s{2, 3, 4};
  CHECK(s.front() == 2);
  CHECK(s.back() == 4);
  CHECK(s.at(1) == 3);
  CHECK_THROWS_AS(s.at(3), std::out_of_range);
  s.insert(s.begin(), 1);  // [1,2,3,4]
  s.insert(s.end(), 5);    // [1,2,3,4,5]: now on the heap
  CHECK(dims_of(s) == std::vector<int64_t>{1, 2, 3, 4, 5});
  s.erase(s.begin() + 1);  // [1,3,4,5]
  CHECK(dims_of(s) == std::vector<int64_t>{1, 3, 4, 5});
  const std::vector<int64_t> more{7, 8};
  s.insert(s.begin() + 1, more.begin(), more.end());  // [1,7,8,3,4,5]
  CHECK(dims_of(s) == std::vector<int64_t>{1, 7, 8, 3, 4, 5});
  s.erase(s.begin(), s.begin() + 2);  // [8,3,4,5]
  CHECK(dims_of(s) == std::vector<int64_t>{8, 3, 4, 5});
  s.pop_back();
  s.resize(6, 9);  // [8,3,4,9,9,9]
  CHECK(dims_of(s) == std::vector<int64_t>{8, 3, 4, 9, 9, 9});
  s.resize(1);
  CHECK(dims_of(s) == std::vector<int64_t>{8});
  s.assign(3, 5);
  CHECK(dims_of(s) == std::vector<int64_t>{5, 5, 5});
  CHECK(dims_of(Shape(2, 6)) == std::vector<int64_t>{6, 6});
  int64_t sum = 0;
  for (int64_t d : s) sum += d;
  CHECK(sum == 15);
  CHECK(std::vector<int64_t>(s.rbegin(), s.rend()) == std::vector<int64_t>{5, 5, 5});

  // From and to std::vector<int64_t>, as when Shape was one.
  const std::vector<int64_t> v{4, 1, 6, 2, 8, 3};
  Shape from = v;
  CHECK(dims_of(from) == v);
  std::vector<int64_t> back = from;
  CHECK(back == v);
  CHECK(from.vec() == v);
  CHECK(from == Shape(v.begin(), v.end()));
  CHECK(Shape{1, 2} < Shape{1, 3});
  CHECK(Shape{1, 2} < Shape{1, 2, 0});
  CHECK_FALSE(Shape{2} < Shape{1, 9});
  CHECK(Shape{} == Shape());
  CHECK(Shape{0} != Shape{});
}

TEST_CASE("shape: a TensorView copied and moved keeps its shape", "[shape]") {
  float x[24] = {};
  hvd::TensorView a(x, hvd::DataType::kFloat32, {2, 3, 4});
  hvd::TensorView b = a;
  CHECK(b.numel() == 24);
  hvd::TensorView c = std::move(b);
  CHECK(c.shape == Shape{2, 3, 4});
  hvd::TensorView big(x, hvd::DataType::kFloat32, {1, 1, 2, 1, 3, 4});  // on the heap
  hvd::TensorView d = big;
  CHECK(d.numel() == 24);
  CHECK(d.shape == big.shape);
  CHECK(d.shape.data() != big.shape.data());
}
