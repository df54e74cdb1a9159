// Copyright horovod_cpp authors. Named shared-memory segments in /dev/shm.
#pragma once

#include <cstddef>
#include <string>

#include "common/status.h"

namespace hvd {

/// Creates the shared-memory object `name` (it must not exist yet), reserves its `bytes` in
/// /dev/shm and maps it at `*out`. Reserving every page now makes a full /dev/shm fail here,
/// with ENOSPC (and `enospc_hint` appended), where a sparse file would be created and the first
/// touch of a missing page would be a SIGBUS. On failure the name is removed again.
Status create_segment(const std::string& name, size_t bytes, const std::string& enospc_hint,
                      void** out);

/// Maps the existing shared-memory object `name` of `bytes` at `*out`. An object shorter than
/// `bytes`, or owned by another user, is an error (never a SIGBUS at a later touch).
Status open_segment(const std::string& name, size_t bytes, void** out);

}  // namespace hvd
