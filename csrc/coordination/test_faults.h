// Copyright horovod_cpp authors. Fault injection for tests: a corrupted rank 0.
#pragma once

#include <string>

#include "coordination/message.h"

namespace hvd {

/// The prefix of the tensor names whose responses corrupt_response_for_test() changes.
constexpr const char* kCorruptPrefix = "hvd_corrupt.";

/// Tests only (HOROVOD_CPP_TEST_CORRUPT_RESPONSE, read on rank 0): changes the successful
/// response `r` for a set of `size` ranks as a memory-corrupted (or hostile) rank 0 might, when
/// its name starts with kCorruptPrefix, so that the tests can see every rank refuse it.
/// `mode`: "shape" (dimension 0 doubled), "dtype" (another element size), "op" (another
/// collective), "reduce" (another reduce op), "root" (another broadcast root), "scalar"
/// (allgather and alltoall: no dimensions), "splits" (alltoall: the last rank sends 2^40 rows
/// to rank 0), "first_dim" (allgather and alltoall: the last rank's first dimension plus one:
/// only that rank can see it). Any other mode leaves `r` alone.
void corrupt_response_for_test(Response* r, const std::string& mode, int size);

}  // namespace hvd
