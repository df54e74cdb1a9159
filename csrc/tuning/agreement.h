// Copyright horovod_cpp authors. The autotuner's agreement over a process set's control plane.
#pragma once

#include "common/status.h"
#include "transport/control_plane.h"

namespace hvd {

/// Replaces this rank's sample (`*seconds` a cycle took, `*bytes` it moved) by the largest of
/// every member's, the same on every member: rank 0 gathers the samples and broadcasts the
/// maxima. Collective over `control` (every member calls it, between cycles). The slowest
/// rank's figures are the set's: every member then scores, and changes, alike.
Status agree_on_slowest(ControlPlane& control, double* seconds, double* bytes);

}  // namespace hvd
