// Copyright horovod_cpp authors. Binary (de)serialization of RequestList and ResponseList.
//
// A small hand-written little-endian format with a version byte: every field is written in a
// fixed order with length prefixes. Parsing checks every length, so a corrupt or truncated
// message is an error, never an out-of-bounds read.
#pragma once

#include <string>

#include "common/status.h"
#include "coordination/message.h"

namespace hvd {

std::string serialize(const RequestList& list);
std::string serialize(const ResponseList& list);
Status deserialize(const std::string& bytes, RequestList* out);
Status deserialize(const std::string& bytes, ResponseList* out);

}  // namespace hvd
