// Copyright horovod_cpp authors. The flat name index (common/name_index.h) against
// std::unordered_map, through long random sequences of inserts, finds and erases, including
// tables where every name collides.
#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/name_index.h"

using namespace hvd;

namespace {

// Every name of the universe is checked against the reference: present ones with their value,
// absent ones as kNone; and for_each visits exactly the reference's entries.
void require_same(const NameIndex& index, const std::unordered_map<std::string, uint32_t>& ref,
                  const std::vector<std::string>& universe) {
  REQUIRE(index.size() == ref.size());
  REQUIRE(index.empty() == ref.empty());
  for (const std::string& name : universe) {
    auto it = ref.find(name);
    INFO("name " << name);
    REQUIRE(index.find(name) == (it == ref.end() ? NameIndex::kNone : it->second));
  }
  std::unordered_map<std::string, uint32_t> seen;
  index.for_each([&](const std::string& name, uint32_t value) {
    REQUIRE(seen.emplace(name, value).second);  // each entry once
  });
  REQUIRE(seen == ref);
}

}  // namespace

TEST_CASE("name index: random inserts, erases and finds agree with unordered_map", "[name_index]") {
  const size_t names = GENERATE(3, 40, 1500);
  std::vector<std::string> universe;
  for (size_t i = 0; i < names; ++i) {
    // Long and short names (SSO and heap strings), sharing long prefixes.
    universe.push_back(i % 3 == 0
                           ? "model.layer" + std::to_string(i) + ".weight.grad.of.a.long.name"
                           : "t" + std::to_string(i));
  }
  std::mt19937 rng(static_cast<unsigned>(names));
  NameIndex index;
  std::unordered_map<std::string, uint32_t> ref;
  for (int step = 0; step < 20000; ++step) {
    const std::string& name = universe[rng() % universe.size()];
    const uint32_t value = static_cast<uint32_t>(rng() % 100000);
    switch (rng() % 3) {
      case 0: {
        const bool fresh = ref.find(name) == ref.end();
        REQUIRE(index.insert(name, value) == fresh);
        if (fresh) ref[name] = value;
        break;
      }
      case 1: {
        auto it = ref.find(name);
        REQUIRE(index.erase(name) == (it == ref.end() ? NameIndex::kNone : it->second));
        if (it != ref.end()) ref.erase(it);
        break;
      }
      default:
        REQUIRE(index.find(name) == (ref.count(name) ? ref[name] : NameIndex::kNone));
    }
    if (step % 2500 == 0) require_same(index, ref, universe);
  }
  require_same(index, ref, universe);
  // Emptying by erases, then by clear(), leaves a usable index.
  for (const std::string& name : universe) {
    auto it = ref.find(name);
    REQUIRE(index.erase(name) == (it == ref.end() ? NameIndex::kNone : it->second));
    if (it != ref.end()) ref.erase(it);
  }
  require_same(index, ref, universe);
  REQUIRE(index.insert(universe[0], 7));
  ref[universe[0]] = 7;
  require_same(index, ref, universe);
  index.clear();
  ref.clear();
  require_same(index, ref, universe);
  REQUIRE(index.insert(universe.back(), 9));
  REQUIRE(index.find(universe.back()) == 9);
}

TEST_CASE("name index: erasing inside long probe runs keeps every name reachable", "[name_index]") {
  // Fill to the growth limit, then erase every other name in insertion order and re-insert
  // them: runs of neighbours wrap around the array's end and are shifted back repeatedly.
  NameIndex index;
  std::unordered_map<std::string, uint32_t> ref;
  std::vector<std::string> universe;
  for (uint32_t i = 0; i < 512; ++i) universe.push_back("grad." + std::to_string(i * 7919u));
  for (int round = 0; round < 4; ++round) {
    for (uint32_t i = 0; i < universe.size(); ++i) {
      if (ref.count(universe[i])) continue;
      REQUIRE(index.insert(universe[i], i + 1000u * static_cast<uint32_t>(round)));
      ref[universe[i]] = i + 1000u * static_cast<uint32_t>(round);
    }
    require_same(index, ref, universe);
    for (size_t i = static_cast<size_t>(round) % 2; i < universe.size(); i += 2) {
      REQUIRE(index.erase(universe[i]) == ref.at(universe[i]));
      ref.erase(universe[i]);
    }
    require_same(index, ref, universe);
  }
}
