// Copyright horovod_cpp authors. The collectives, as every layer names them.
//
// The negotiation (coordination/) decides which collective runs, the executor (core/) hands it
// to a transport (transport/): both name it with this plain value, from the ground floor.
#pragma once

#include <cstdint>

namespace hvd {

/// The collective a request asks for. The numeric values are part of the wire format.
enum class OpType : uint8_t {
  kAllreduce = 0,
  kAllgather = 1,
  kBroadcast = 2,
  kBarrier = 3,
  kAlltoall = 4,
  kReducescatter = 5,
  kJoin = 6,  ///< this rank has no more data; it joins later allreduces with zeros
};
constexpr uint8_t kMaxOpType = 6;

/// Lower-case name of `op` ("allreduce", "reducescatter", ...), for messages and the timeline.
const char* op_type_name(OpType op);

}  // namespace hvd
