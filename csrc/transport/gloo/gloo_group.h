// Copyright horovod_cpp authors. What every Gloo group of a job is made from, and how.
//
// A group is a gloo::Context connected as a full mesh over Gloo's TCP device, its peers found
// through a rendezvous store under a key prefix of its own (so that concurrent or later
// groups never read each other's addresses). The job's World owns the store and the device;
// the unit tests use Gloo's in-memory HashStore and loopback.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace gloo {
class Context;
namespace rendezvous {
class Store;
}
namespace transport {
class Device;
}
}  // namespace gloo

namespace hvd {

/// Shared by every group of a job; outlives them all.
struct GlooJob {
  gloo::rendezvous::Store* store = nullptr;
  std::shared_ptr<gloo::transport::Device> device;
  /// How long connecting a group waits for its peers' addresses in the store
  /// (HOROVOD_GLOO_TIMEOUT_SECONDS).
  std::chrono::milliseconds connect_timeout{30000};
  /// How long a pair connect waits for a peer whose address is known (0: connect_timeout).
  /// Elastic jobs bound it by the op timeout: a member that published its address and died
  /// (the store's abort key cannot reach that wait) must not hold the others past the
  /// driver's ready timeout.
  std::chrono::milliseconds pair_timeout{0};
  /// How long one collective waits for a peer (HOROVOD_CPP_GLOO_OP_TIMEOUT_SECONDS).
  std::chrono::milliseconds op_timeout{5000};
  /// This rank's host (HOROVOD_HOSTNAME or gethostname()): split_host() groups by it.
  std::string hostname;
  /// CPU reductions are issued in pieces of at most this many bytes.
  int64_t chunk_bytes = 4ll << 20;
  /// Data-plane allreduces, allgathers and broadcasts up to this many bytes take the direct
  /// links (GlooDataPlane); the same on every rank (GlooWorld::init agrees on it).
  int64_t direct_max_bytes = 16 << 10;
};

/// A Gloo TCP device bound to `iface` when given, else to `hostname`'s address. Gloo's TCP
/// pairs write with writev(), which raises SIGPIPE when a peer has gone; at its default
/// disposition that signal would end this process before Gloo reports the closed connection
/// (and the job could shrink without it). So the first device sets SIGPIPE to SIG_IGN when it
/// is still SIG_DFL (Python does so already); a handler the program installed is left alone.
std::shared_ptr<gloo::transport::Device> make_tcp_device(const std::string& hostname,
                                                         const std::string& iface);

/// Loopback TCP device (tests, and jobs whose store is local).
std::shared_ptr<gloo::transport::Device> make_loopback_device();

/// Connects member `rank` of `size` as a full mesh through `job.store` under `prefix`.
/// Collective over the members. Failures (a peer that never came, a refused store) name
/// `name`, the group.
Status connect_group(const GlooJob& job, const std::string& prefix, int rank, int size,
                     const std::string& name, std::shared_ptr<gloo::Context>* out);

class DirectLinks;

/// connect_group() for DirectLinks (gloo_direct.h): the pairs connect with the op timeout,
/// which a synchronous pair keeps as its read timeout. Collective over the members.
Status connect_direct_links(const GlooJob& job, const std::string& prefix, int rank, int size,
                            const std::string& name, std::unique_ptr<DirectLinks>* out);

}  // namespace hvd
