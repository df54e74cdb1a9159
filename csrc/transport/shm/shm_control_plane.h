// Copyright horovod_cpp authors. The negotiation's bit-vector AND through shared memory.
//
// Every coordination cycle of a process set ANDs a short bit vector across its ranks
// (coordination/controller.cc): the steady-state negotiation. Over MPI that exchange is a
// point-to-point round per doubling step through Open MPI's matching and progress engine
// (about 0.5 us at two ranks of one host, more when ranks outnumber cores); through shared
// memory it is a store, a flag and a read of each peer's line.
//
// When every rank of the set is on one host, ShmControlPlane does the AND in one segment
// (rank 0 creates it, the others map it): each rank has a slot with a round counter and two
// buffers of words. In round s a rank writes its words to buffer s % 2, publishes s, waits
// for each peer's counter to reach s and ANDs the peer's buffer s % 2 into its own vector.
// A rank writes buffer s % 2 again in round s + 2 only: by then every peer has published
// round s + 1 (this rank waited for it), which it does only after reading round s.
// Gathers and broadcasts (the full negotiation: rare in steady state, of variable size) and
// vectors longer than a buffer go to the MPI plane it wraps; every rank passes vectors of the
// same length, so every rank takes the same path in every round.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/bootstrap.h"
#include "transport/control_plane.h"

namespace hvd {

/// Collective over `group` (the set's ranks): a ControlPlane whose allreduce_and() runs through
/// shared memory when every rank is on one host (`host` as in split_by_host()) and every rank
/// could map the segment; otherwise `fallback` itself, on every rank (the reason is logged).
/// `max_words`: the longest vector that goes through shared memory (longer ones use
/// `fallback`). `yield_core`: ranks outnumber cores, so waits yield while they spin.
/// A peer that dies while a rank waits for it fails the negotiation within ~50 ms with a Status
/// of `lost_code` (PeerWatch::set_lost_code(): kInternal under the Gloo controller).
std::unique_ptr<ControlPlane> make_shm_control_plane(Bootstrap& group, int set_id, int host,
                                                     size_t max_words, bool yield_core,
                                                     std::unique_ptr<ControlPlane> fallback,
                                                     ErrorCode lost_code = ErrorCode::kBackend);

}  // namespace hvd
