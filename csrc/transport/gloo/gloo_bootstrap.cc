// Copyright horovod_cpp authors.
#include "transport/gloo/gloo_bootstrap.h"

#include <gloo/allgather.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/context.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "transport/gloo/gloo_call.h"
#include "transport/gloo/gloo_data_plane.h"

namespace hvd {

GlooBootstrap::GlooBootstrap(const GlooJob* job, std::shared_ptr<gloo::Context> ctx,
                             std::string prefix, std::string name,
                             std::shared_ptr<DirectLinks> direct)
    : job_(job),
      ctx_(std::move(ctx)),
      direct_(std::move(direct)),
      prefix_(std::move(prefix)),
      name_(std::move(name)),
      rank_(ctx_->rank),
      size_(ctx_->size) {}

Status GlooBootstrap::connect(const GlooJob* job, const std::string& prefix, int rank, int size,
                              std::string name, std::unique_ptr<GlooBootstrap>* out) {
  std::shared_ptr<gloo::Context> ctx;
  HVD_RETURN_IF_ERROR(connect_group(*job, prefix, rank, size, name, &ctx));
  std::unique_ptr<DirectLinks> direct;
  if (size > 1) {
    HVD_RETURN_IF_ERROR(
        connect_direct_links(*job, prefix + "/direct", rank, size, name + " (direct)", &direct));
  }
  *out = std::make_unique<GlooBootstrap>(job, std::move(ctx), prefix, std::move(name),
                                         std::move(direct));
  return Status::OK();
}

Status GlooBootstrap::allgather(const void* mine, size_t bytes, void* all) {
  if (bytes == 0) return Status::OK();
  if (size_ == 1) {
    std::memmove(all, mine, bytes);
    return Status::OK();
  }
  return gloo_call(name_, "bootstrap allgather", [&] {
    gloo::AllgatherOptions opts(ctx_);
    opts.setInput(const_cast<char*>(static_cast<const char*>(mine)), bytes);
    opts.setOutput(static_cast<char*>(all), bytes * static_cast<size_t>(size_));
    gloo::allgather(opts);
  });
}

Status GlooBootstrap::broadcast(void* buf, size_t bytes, int root) {
  if (bytes == 0 || size_ == 1) return Status::OK();
  return gloo_call(name_, "bootstrap broadcast", [&] {
    gloo::BroadcastOptions opts(ctx_);
    opts.setRoot(root);
    opts.setOutput(static_cast<char*>(buf), bytes);
    gloo::broadcast(opts);
  });
}

Status GlooBootstrap::barrier() {
  if (size_ == 1) return Status::OK();
  return gloo_call(name_, "bootstrap barrier", [&] {
    gloo::BarrierOptions opts(ctx_);
    gloo::barrier(opts);
  });
}

Status GlooBootstrap::split_named(int color, int key, const std::string& suffix,
                                  std::unique_ptr<Bootstrap>* out) {
  const int64_t mine[2] = {color, key};
  std::vector<int64_t> all(2 * static_cast<size_t>(size_));
  HVD_RETURN_IF_ERROR(allgather(mine, sizeof(mine), all.data()));
  // The new group: members of this color ordered by (key, rank here).
  std::vector<std::pair<int64_t, int>> members;
  for (int r = 0; r < size_; ++r) {
    if (all[2 * static_cast<size_t>(r)] == color)
      members.push_back({all[2 * static_cast<size_t>(r) + 1], r});
  }
  std::sort(members.begin(), members.end());
  int new_rank = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].second == rank_) new_rank = static_cast<int>(i);
  }
  const std::string prefix =
      prefix_ + "/s" + std::to_string(splits_++) + "c" + std::to_string(color);
  std::unique_ptr<GlooBootstrap> group;
  HVD_RETURN_IF_ERROR(connect(job_, prefix, new_rank, static_cast<int>(members.size()),
                              name_ + " / " + suffix, &group));
  *out = std::move(group);
  return Status::OK();
}

Status GlooBootstrap::split(int color, int key, std::unique_ptr<Bootstrap>* out) {
  return split_named(color, key, "split " + std::to_string(color), out);
}

// The host's color is the lowest rank here with the same host name (names are exchanged in
// fixed 256-byte slots, longer ones cut: a host name has at most 253 characters).
Status GlooBootstrap::split_host(std::unique_ptr<Bootstrap>* out) {
  constexpr size_t kSlot = 256;
  char mine[kSlot] = {};
  std::strncpy(mine, job_->hostname.c_str(), kSlot - 1);
  std::vector<char> all(kSlot * static_cast<size_t>(size_));
  HVD_RETURN_IF_ERROR(allgather(mine, kSlot, all.data()));
  int color = rank_;
  for (int r = 0; r < rank_; ++r) {
    if (std::strncmp(all.data() + kSlot * static_cast<size_t>(r), mine, kSlot) == 0) {
      color = r;
      break;
    }
  }
  return split_named(color, rank_, "host", out);
}

Status GlooBootstrap::make_data_plane(std::unique_ptr<DataPlane>* out) {
  *out = std::make_unique<GlooDataPlane>(ctx_, name_, direct_, job_->direct_max_bytes);
  return Status::OK();
}

}  // namespace hvd
