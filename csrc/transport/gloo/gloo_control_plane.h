// Copyright horovod_cpp authors. The ControlPlane over a Gloo context of its own.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/control_plane.h"
#include "transport/gloo/gloo_direct.h"

namespace gloo {
class Context;
}

namespace hvd {

/// The negotiation's exchanges over a connected Gloo context that nothing else uses (the
/// data plane has another), so negotiation and data never interleave on one connection.
/// Every exchange is latency-bound and takes the shortest chain of messages (gloo_exchange.h):
/// allreduce_and by recursive doubling, gather and broadcast point to point with the length
/// and the first bytes in one message. With `direct` links (between the same members, on a
/// context of their own) the small messages are read in the calling thread, not handed over
/// by Gloo's device thread. A lost peer fails the call with an ErrorCode::kInternal Status
/// within the context's timeout.
class GlooControlPlane : public ControlPlane {
 public:
  /// `group` names the group in errors; `direct` may be null.
  GlooControlPlane(std::shared_ptr<gloo::Context> ctx, std::string group,
                   std::unique_ptr<DirectLinks> direct = nullptr);
  ~GlooControlPlane() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status allreduce_and(std::vector<uint64_t>* words) override;
  Status gather(const std::string& mine, std::vector<std::string>* all) override;
  Status broadcast(std::string* blob) override;

 private:
  std::shared_ptr<gloo::Context> ctx_;
  std::unique_ptr<DirectLinks> direct_;
  const std::string group_;
  int rank_ = 0, size_ = 1;
  /// The peers' bit vectors, the gather's and the broadcast's first messages (kept between
  /// cycles: their sizes repeat).
  std::vector<char> scratch_;
};

}  // namespace hvd
