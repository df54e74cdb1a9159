// Copyright horovod_cpp authors. ResponseCache: positions, LRU eviction, reuse of free bits.
#include <algorithm>
#include <list>
#include <map>
#include <random>
#include <set>
#include <string>

#include <catch2/catch.hpp>

#include "coordination/response_cache.h"

using namespace hvd;

namespace {

Response resp(const std::string& name, int64_t dim = 4) {
  Response r;
  r.name = name;
  r.shape = {dim};
  return r;
}

}  // namespace

TEST_CASE("cache put and find", "[response_cache]") {
  ResponseCache c(4);
  CHECK(c.enabled());
  CHECK(c.capacity() == 4);
  CHECK(c.size() == 0);
  CHECK(c.num_bits() == 0);
  CHECK_FALSE(c.find("a").has_value());
  std::optional<uint32_t> ev;
  const uint32_t a = c.put(resp("a"), &ev);
  CHECK_FALSE(ev.has_value());
  const uint32_t b = c.put(resp("b"), &ev);
  CHECK_FALSE(ev.has_value());
  CHECK(a == 0);
  CHECK(b == 1);
  CHECK(c.size() == 2);
  CHECK(c.num_bits() == 2);
  REQUIRE(c.find("a") == std::optional<uint32_t>(0));
  REQUIRE(c.find("b") == std::optional<uint32_t>(1));
  CHECK(c.has_bit(0));
  CHECK(c.has_bit(1));
  CHECK_FALSE(c.has_bit(2));
  CHECK(c.at(1).name == "b");
  // Same name again: replaced in place, no new position.
  CHECK(c.put(resp("a", 9), &ev) == 0);
  CHECK_FALSE(ev.has_value());
  CHECK(c.size() == 2);
  CHECK(c.at(0).shape == Shape({9}));
}

TEST_CASE("cache evicts the least recently used entry", "[response_cache]") {
  ResponseCache c(3);
  std::optional<uint32_t> ev;
  c.put(resp("a"), &ev);  // bit 0
  c.put(resp("b"), &ev);  // bit 1
  c.put(resp("c"), &ev);  // bit 2
  c.touch(0);             // order now (most recent first): a c b
  c.put(resp("d"), &ev);  // evicts b
  REQUIRE(ev == std::optional<uint32_t>(1));
  CHECK_FALSE(c.find("b").has_value());
  CHECK(c.find("d") == std::optional<uint32_t>(1));  // the freed position is reused
  CHECK(c.size() == 3);
  c.put(resp("a", 5), &ev);  // replacing a also makes it most recent: order a d c
  CHECK_FALSE(ev.has_value());
  c.put(resp("e"), &ev);  // evicts c (bit 2)
  REQUIRE(ev == std::optional<uint32_t>(2));
  CHECK_FALSE(c.find("c").has_value());
  CHECK(c.find("e") == std::optional<uint32_t>(2));
  c.put(resp("f"), &ev);  // order e a d: evicts d (bit 1)
  REQUIRE(ev == std::optional<uint32_t>(1));
  CHECK(c.find("a") == std::optional<uint32_t>(0));
}

TEST_CASE("cache erase frees the lowest bits first", "[response_cache]") {
  ResponseCache c(10);
  std::optional<uint32_t> ev;
  for (int i = 0; i < 6; ++i) c.put(resp("t" + std::to_string(i)), &ev);
  CHECK(c.num_bits() == 6);
  c.erase(4);
  c.erase(1);
  c.erase(1);  // erasing a free position does nothing
  CHECK(c.size() == 4);
  CHECK(c.num_bits() == 6);
  CHECK_FALSE(c.has_bit(1));
  CHECK_FALSE(c.find("t1").has_value());
  CHECK(c.put(resp("x"), &ev) == 1);
  CHECK(c.put(resp("y"), &ev) == 4);
  CHECK(c.put(resp("z"), &ev) == 6);
  // Removing the highest positions shortens the bit vector.
  c.erase(6);
  c.erase(5);
  CHECK(c.num_bits() == 5);
  for (uint32_t b = 0; b < 5; ++b) c.erase(b);
  CHECK(c.num_bits() == 0);
  CHECK(c.size() == 0);
}

TEST_CASE("cache with capacity 0 is disabled", "[response_cache]") {
  ResponseCache c(0);
  CHECK_FALSE(c.enabled());
}

TEST_CASE("cache matches a reference LRU model under random operations", "[response_cache]") {
  const uint32_t cap = GENERATE(1u, 2u, 5u, 16u);
  ResponseCache c(cap);
  // Reference: names in LRU order (front = most recent) and name -> bit; free bits lowest
  // first; next new bit = one past the highest ever used.
  std::list<std::string> lru;
  std::map<std::string, uint32_t> bit_of;
  std::set<uint32_t> free_bits;
  uint32_t next_bit = 0;
  std::mt19937 rng(1234 + cap);
  for (int step = 0; step < 3000; ++step) {
    const std::string name = "n" + std::to_string(rng() % (cap * 3 + 2));
    const int what = static_cast<int>(rng() % 10);
    if (what < 6) {  // put
      std::optional<uint32_t> ev;
      const uint32_t got = c.put(resp(name), &ev);
      std::optional<uint32_t> expect_ev;
      uint32_t expect_bit;
      if (bit_of.count(name)) {
        expect_bit = bit_of[name];
        lru.remove(name);
      } else {
        if (bit_of.size() >= cap) {
          const std::string victim = lru.back();
          lru.pop_back();
          expect_ev = bit_of[victim];
          free_bits.insert(bit_of[victim]);
          bit_of.erase(victim);
        }
        if (!free_bits.empty()) {
          expect_bit = *free_bits.begin();
          free_bits.erase(free_bits.begin());
        } else {
          expect_bit = next_bit++;
        }
        bit_of[name] = expect_bit;
      }
      lru.push_front(name);
      REQUIRE(got == expect_bit);
      REQUIRE(ev == expect_ev);
    } else if (what < 8) {  // touch a live entry
      if (bit_of.count(name)) {
        c.touch(bit_of[name]);
        lru.remove(name);
        lru.push_front(name);
      }
    } else {  // erase
      if (bit_of.count(name)) {
        c.erase(bit_of[name]);
        free_bits.insert(bit_of[name]);
        bit_of.erase(name);
        lru.remove(name);
      }
    }
    REQUIRE(c.size() == bit_of.size());
    uint32_t expect_bits = 0;
    for (const auto& [n, b] : bit_of) expect_bits = std::max(expect_bits, b + 1);
    REQUIRE(c.num_bits() == expect_bits);
    for (const auto& [n, b] : bit_of) {
      REQUIRE(c.find(n) == std::optional<uint32_t>(b));
      REQUIRE(c.at(b).name == n);
    }
  }
}
