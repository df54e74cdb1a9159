// Copyright horovod_cpp authors. The DataPlane over a Gloo context.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/data_plane.h"
#include "transport/gloo/gloo_direct.h"

namespace gloo {
class Context;
}

namespace hvd {

/// Every DataPlane call as a Gloo collective on one connected context (the group's; shared
/// with its GlooBootstrap, and used by one thread at a time like it); allreduces of up to
/// 64 KiB by recursive doubling and small broadcasts from the root to each member instead
/// (gloo_exchange.h), over the group's direct links (gloo_direct.h) when given and the
/// buffer fits them; reducescatter as a ring of our own. A peer lost or silent
/// for longer than the context's timeout fails the call with an ErrorCode::kInternal Status
/// naming the group and the call; the context is then unusable, and so is this plane: the
/// job shuts down and re-initializes. failures_are_fatal() is false: Gloo's timeout frees
/// every surviving member, none is left inside the collective.
class GlooDataPlane : public DataPlane {
 public:
  /// `group` names the group in errors; `direct` (the same members' links, may be null) is
  /// shared with the group's other planes, which run on the same thread. Allreduces,
  /// broadcasts and allgathers (all blocks together) of at most `direct_max_bytes` go over
  /// `direct` (the same value on every member).
  GlooDataPlane(std::shared_ptr<gloo::Context> ctx, std::string group,
                std::shared_ptr<DirectLinks> direct = nullptr,
                int64_t direct_max_bytes = DirectLinks::kMaxBytes);
  const char* name() const override { return "gloo"; }
  Status allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op) override;
  Status allgatherv(const void* in, void* out, const std::vector<int64_t>& bytes_per_rank) override;
  Status alltoallv(const void* in, const std::vector<int64_t>& send_bytes, void* out,
                   const std::vector<int64_t>& recv_bytes) override;
  Status reducescatter(const void* in, void* out, const std::vector<int64_t>& recv_counts,
                       DataType dtype, ReduceOp op) override;
  Status broadcast(void* buf, int64_t bytes, int root) override;
  Status barrier() override;

 private:
  std::shared_ptr<gloo::Context> ctx_;
  std::shared_ptr<DirectLinks> direct_;
  const std::string group_;
  int rank_ = 0, size_ = 1;
  size_t direct_max_ = 0;  // 0 without direct links
  /// reducescatter's running sums of every block and the block coming from the left
  /// neighbour; incoming_ also holds the peers' values of a small allreduce (kept: their
  /// sizes repeat step after step).
  std::vector<char> scratch_, incoming_;
};

}  // namespace hvd
