// Copyright horovod_cpp authors. Escaping of tensor names for the timeline's JSON.
#include <string>

#include <catch2/catch.hpp>

#include "common/json_escape.h"

using hvd::json_escape;

TEST_CASE("names that are valid UTF-8 keep their characters", "[json_escape]") {
  CHECK(json_escape("layer1.weight") == "layer1.weight");
  CHECK(json_escape("gewicht\xc3\xa4\xe2\x82\xac\xf0\x9f\x98\x80") ==
        "gewicht\xc3\xa4\xe2\x82\xac\xf0\x9f\x98\x80");
  CHECK(json_escape("a\"b\\c\nd\te\x01\x1f") == "a\\\"b\\\\c\\nd\\te\\u0001\\u001f");
}

// Found with the fuzz_json_escape target (test/fuzz/regressions/fuzz_json_escape/
// lone_continuation_byte): a byte that is not UTF-8 was copied as is, and the timeline file
// was no longer valid JSON (JSON text must be UTF-8).
TEST_CASE("bytes that are not UTF-8 are escaped", "[json_escape]") {
  CHECK(json_escape(std::string("\x84\n", 2)) == "\\u0084\\n");
  CHECK(json_escape("\xff") == "\\u00ff");
  CHECK(json_escape("\xc3") == "\\u00c3");                    // truncated sequence
  CHECK(json_escape("\xc0\xaf") == "\\u00c0\\u00af");         // overlong '/'
  CHECK(json_escape("\xed\xa0\x80") == "\\u00ed\\u00a0\\u0080");  // a surrogate
  CHECK(json_escape("\xf4\x90\x80\x80") == "\\u00f4\\u0090\\u0080\\u0080");  // > U+10FFFF
  CHECK(json_escape("ok\xe2\x82") == "ok\\u00e2\\u0082");
}
