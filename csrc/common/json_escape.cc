// Copyright horovod_cpp authors.
#include "common/json_escape.h"

#include <cstdint>
#include <cstdio>

namespace hvd {
namespace {

// Length of the valid UTF-8 sequence starting at s[i] (1 for ASCII), or 0 if the bytes there
// are not valid UTF-8 (stray continuation byte, overlong form, surrogate, beyond U+10FFFF,
// truncated sequence).
size_t utf8_sequence_length(const std::string& s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return 1;
  size_t len;
  uint32_t cp;
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2, cp = c & 0x1fu;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3, cp = c & 0x0fu;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4, cp = c & 0x07u;
  } else {
    return 0;
  }
  if (s.size() - i < len) return 0;
  for (size_t k = 1; k < len; ++k) {
    const unsigned char d = static_cast<unsigned char>(s[i + k]);
    if ((d & 0xc0u) != 0x80u) return 0;
    cp = (cp << 6) | (d & 0x3fu);
  }
  if (len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) return 0;
  if (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) return 0;
  return len;
}

void append_code_unit(std::string* out, unsigned value) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "\\u%04x", value);
  *out += buf;
}

}  // namespace

std::string json_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 2);
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    const size_t len = utf8_sequence_length(s, i);
    if (len == 0) {
      // Not UTF-8: JSON text must be, so the byte becomes the code point of the same value.
      append_code_unit(&out, static_cast<unsigned char>(c));
      ++i;
      continue;
    }
    if (len > 1) {
      out.append(s, i, len);
      i += len;
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          append_code_unit(&out, static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
    ++i;
  }
  return out;
}

}  // namespace hvd
