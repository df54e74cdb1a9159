// Copyright horovod_cpp authors. Rank 0's check that all ranks asked for the same collective.
#pragma once

#include <vector>

#include "coordination/message.h"

namespace hvd {

/// Builds the response for one tensor from every rank's request (indexed by rank; null for a
/// rank that has joined and takes part with zeros, allreduce only). When the ranks disagree,
/// the response carries an error that names the tensor, the ranks and the differing values,
/// e.g. "allreduce 'fc.weight': rank 0 sent float32[4,5], rank 2 sent float32[4,6]".
/// `names`: the global rank of each rank of the set, which the messages name (empty: the
/// ranks are global ones).
Response build_response(const std::vector<const Request*>& per_rank,
                        const std::vector<int>& names = {});

}  // namespace hvd
