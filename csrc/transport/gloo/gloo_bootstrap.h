// Copyright horovod_cpp authors. The Bootstrap over a Gloo context.
#pragma once

#include <memory>
#include <string>

#include "transport/bootstrap.h"
#include "transport/gloo/gloo_direct.h"
#include "transport/gloo/gloo_group.h"

namespace gloo {
class Context;
}

namespace hvd {

/// A group of ranks as a connected Gloo context. The exchanges are Gloo collectives on it;
/// a split connects a new context through the job's store under this group's prefix plus
/// the split's number (every member splits in the same order, so the numbers agree) and its
/// color; split_host() splits by the members' host names. The data plane is a GlooDataPlane
/// on this group's context.
class GlooBootstrap : public Bootstrap {
 public:
  /// `job` outlives this object; `ctx` is connected (connect_group) under `prefix`; `direct`
  /// (may be null) links the same members for the data plane's small messages.
  GlooBootstrap(const GlooJob* job, std::shared_ptr<gloo::Context> ctx, std::string prefix,
                std::string name, std::shared_ptr<DirectLinks> direct = nullptr);

  /// Connects a new group of `size` members under `prefix`, and its direct links (collective
  /// over them).
  static Status connect(const GlooJob* job, const std::string& prefix, int rank, int size,
                        std::string name, std::unique_ptr<GlooBootstrap>* out);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  Status allgather(const void* mine, size_t bytes, void* all) override;
  Status broadcast(void* buf, size_t bytes, int root) override;
  Status barrier() override;
  Status split(int color, int key, std::unique_ptr<Bootstrap>* out) override;
  Status split_host(std::unique_ptr<Bootstrap>* out) override;
  Status make_data_plane(std::unique_ptr<DataPlane>* out) override;

  const std::shared_ptr<gloo::Context>& context() const { return ctx_; }

 private:
  /// split() with the suffix that names the new group.
  Status split_named(int color, int key, const std::string& suffix,
                     std::unique_ptr<Bootstrap>* out);

  const GlooJob* job_;
  std::shared_ptr<gloo::Context> ctx_;
  std::shared_ptr<DirectLinks> direct_;
  const std::string prefix_;
  const std::string name_;
  int rank_ = 0, size_ = 1;
  int splits_ = 0;  ///< splits made so far: the next one's key prefix
};

}  // namespace hvd
