// Copyright horovod_cpp authors. Binary (de)serialization of RequestList and ResponseList.
//
// A small hand-written little-endian format with a version byte: every field is written in a
// fixed order with length prefixes. Parsing checks every length, so a corrupt or truncated
// message is an error, never an out-of-bounds read.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "coordination/message.h"

namespace hvd {

/// The version byte of every message. Bumped whenever a field is added, removed or
/// reordered; every rank checks at init that all ranks use the same one (core/runtime.cc).
/// 3: Request::error and ResponseList::fatal.
constexpr uint8_t kWireFormatVersion = 3;

std::string serialize(const RequestList& list);
std::string serialize(const ResponseList& list);
Status deserialize(const std::string& bytes, RequestList* out);
Status deserialize(const std::string& bytes, ResponseList* out);

/// Checks what the decoder cannot: that every response's per-rank vectors fit a process set of
/// `set_size` ranks (allgather and alltoall: one first dimension per rank; alltoall: size x size
/// splits; no negative sizes), so that no rank indexes them out of bounds. An error names the
/// tensor and what is wrong.
Status check_response_list(const ResponseList& list, int set_size);

}  // namespace hvd
