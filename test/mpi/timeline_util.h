// Copyright horovod_cpp authors. Reading the timeline file (HOROVOD_TIMELINE) in the
// multi-rank tests.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

namespace hvdtest {

/// The timeline at `path`, parsed (throws on invalid JSON).
inline nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(ss.str());
}

/// Names of the phases the timeline `events` recorded for `tensor`.
inline std::set<std::string> phases_of(const nlohmann::json& events, const std::string& tensor) {
  int tid = -1;
  for (const auto& e : events) {
    if (e.value("ph", "") == "M" && e["args"].value("name", "") == tensor) tid = e["tid"];
  }
  std::set<std::string> out;
  for (const auto& e : events) {
    if (e.value("tid", -2) == tid && e.value("ph", "") != "M") out.insert(e.value("name", ""));
  }
  return out;
}

}  // namespace hvdtest
