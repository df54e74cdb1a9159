// Copyright horovod_cpp authors. The ControlPlane over a Gloo context of its own.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/control_plane.h"

namespace gloo {
class Context;
}

namespace hvd {

/// The negotiation's exchanges over a connected Gloo context that nothing else uses (the
/// data plane has another), so negotiation and data never interleave on one connection.
/// allreduce_and is a Gloo allreduce with an AND; gather sends each rank's length and bytes
/// to rank 0 point to point; broadcast sends the length, then the bytes. A lost peer fails
/// the call with an ErrorCode::kInternal Status within the context's timeout.
class GlooControlPlane : public ControlPlane {
 public:
  /// `group` names the group in errors.
  GlooControlPlane(std::shared_ptr<gloo::Context> ctx, std::string group);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status allreduce_and(std::vector<uint64_t>* words) override;
  Status gather(const std::string& mine, std::vector<std::string>* all) override;
  Status broadcast(std::string* blob) override;

 private:
  std::shared_ptr<gloo::Context> ctx_;
  const std::string group_;
  int rank_ = 0, size_ = 1;
  std::vector<int64_t> lengths_;  ///< gather's lengths at rank 0 (kept between cycles)
};

}  // namespace hvd
