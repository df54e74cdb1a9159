// Copyright horovod_cpp authors.
#include "transport/gloo/gloo_group.h"

#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include "transport/gloo/gloo_call.h"

namespace hvd {

std::shared_ptr<gloo::transport::Device> make_loopback_device() {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  return gloo::transport::tcp::CreateDevice(attr);
}

Status connect_group(const GlooJob& job, const std::string& prefix, int rank, int size,
                     const std::string& name, std::shared_ptr<gloo::Context>* out) {
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  const std::string call = "connecting (store prefix " + prefix + ")";
  HVD_RETURN_IF_ERROR(gloo_call(name, call.c_str(), [&] {
    gloo::rendezvous::PrefixStore store(prefix, *job.store);
    ctx->setTimeout(job.connect_timeout);
    auto device = job.device;
    ctx->connectFullMesh(store, device);
    // From here on a collective that waits longer than this on a peer fails: the peer is
    // taken for lost (Config's op timeout, a few seconds).
    ctx->setTimeout(job.op_timeout);
  }));
  *out = std::move(ctx);
  return Status::OK();
}

}  // namespace hvd
