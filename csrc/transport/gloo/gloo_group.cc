// Copyright horovod_cpp authors.
#include "transport/gloo/gloo_group.h"

#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <signal.h>

#include <mutex>

#include "transport/gloo/gloo_call.h"

namespace hvd {

namespace {

void ignore_sigpipe_at_default() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction now = {};
    if (::sigaction(SIGPIPE, nullptr, &now) != 0) return;
    if ((now.sa_flags & SA_SIGINFO) != 0 || now.sa_handler != SIG_DFL) return;
    struct sigaction ignore = {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    ::sigaction(SIGPIPE, &ignore, nullptr);
  });
}

}  // namespace

std::shared_ptr<gloo::transport::Device> make_tcp_device(const std::string& hostname,
                                                         const std::string& iface) {
  ignore_sigpipe_at_default();
  gloo::transport::tcp::attr attr;
  if (!iface.empty()) {
    attr.iface = iface;
  } else {
    attr.hostname = hostname;
  }
  return gloo::transport::tcp::CreateDevice(attr);
}

std::shared_ptr<gloo::transport::Device> make_loopback_device() {
  return make_tcp_device("127.0.0.1", "");
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
