// Copyright horovod_cpp authors. Fuzz target: the wire decoders (coordination/wire.h).
//
// Rank 0 decodes a RequestList from every rank in each full cycle, and every rank decodes
// rank 0's ResponseList. The input is tried as both. Whatever decodes must re-encode to a
// message that decodes to the same value (so nothing is half-read), and nothing may read out
// of bounds, overflow or allocate without bound (the sanitizers and libFuzzer's -rss_limit
// watch for that).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "coordination/wire.h"
#include "fuzz_input.h"

namespace {

template <typename List>
void round_trip(const std::string& bytes) {
  List list;
  if (!hvd::deserialize(bytes, &list).ok()) return;
  const std::string again = hvd::serialize(list);
  List second;
  HVD_FUZZ_CHECK(hvd::deserialize(again, &second).ok());
  HVD_FUZZ_CHECK(hvd::serialize(second) == again);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  round_trip<hvd::RequestList>(bytes);
  round_trip<hvd::ResponseList>(bytes);
  return 0;
}
