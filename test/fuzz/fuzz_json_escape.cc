// Copyright horovod_cpp authors. Fuzz target: tensor names into the timeline's JSON.
//
// Rank 0 writes every tensor name it receives from any rank into the timeline file. Whatever
// the bytes, the escaped name inside quotes must be valid JSON (so the file stays readable by
// chrome://tracing and Perfetto), and a name that is valid UTF-8 must read back unchanged.
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "common/json_escape.h"
#include "fuzz_input.h"

namespace {

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len;
    uint32_t cp;
    if (c < 0x80) { ++i; continue; }
    if (c >= 0xc2 && c <= 0xdf) { len = 2; cp = c & 0x1f; }
    else if (c >= 0xe0 && c <= 0xef) { len = 3; cp = c & 0x0f; }
    else if (c >= 0xf0 && c <= 0xf4) { len = 4; cp = c & 0x07; }
    else return false;
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10ffff))) {
      return false;
    }
    i += len;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string name(reinterpret_cast<const char*>(data), size);
  const std::string doc = "\"" + hvd::json_escape(name) + "\"";
  nlohmann::json parsed = nlohmann::json::parse(doc, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    std::fprintf(stderr, "not valid JSON: %s\n", doc.c_str());
  }
  HVD_FUZZ_CHECK(!parsed.is_discarded() && parsed.is_string());
  if (valid_utf8(name)) HVD_FUZZ_CHECK(parsed.get<std::string>() == name);
  return 0;
}
