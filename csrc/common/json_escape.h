// Copyright horovod_cpp authors. Escaping of arbitrary bytes (tensor names, which reach rank 0
// from every rank) into the body of a JSON string, for the timeline.
#pragma once

#include <string>

namespace hvd {

/// The body (without the quotes) of a JSON string literal for `s`. Control characters, quotes
/// and backslashes are escaped; so is every byte that is not part of valid UTF-8 (as the code
/// point of the same value, U+0080..U+00FF), so the result is always valid JSON, and it reads
/// back as `s` exactly when `s` is valid UTF-8.
std::string json_escape(const std::string& s);

}  // namespace hvd
