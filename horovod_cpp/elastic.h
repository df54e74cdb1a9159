// Copyright horovod_cpp authors. Public API: elastic training (issue 37), Horovod's elastic
// model on the Gloo controller.
//
// An elastic job is started by hvdrun's elastic driver (HOROVOD_ELASTIC=1). When a worker is
// lost, the survivors get hvd::InternalError from the collective in flight; they shut down,
// init() again and receive their new places (a new generation) from the driver. When the
// driver finds new hosts, it flags the running generation, and the workers learn it through
// hosts_updated() at a point of their choosing (a commit), then re-init to let them in.
#pragma once

#include <cstdint>

namespace hvd {
namespace elastic {

/// Whether the elastic driver asked the current membership to change without a failure (new
/// hosts were found). Collective: every rank calls it at the same point of its program, and
/// every rank gets rank 0's answer. False outside elastic mode (still safe to call on every
/// rank). Throws hvd::InternalError when a peer is lost, NotInitializedError before init().
bool hosts_updated();

/// The generation of the current elastic membership (0 for the first, one more for each
/// membership after it); 0 outside elastic mode. Throws NotInitializedError before init().
int64_t generation();

}  // namespace elastic
}  // namespace hvd
