// Copyright horovod_cpp authors.
#include "transport/gloo/gloo_group.h"

#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <signal.h>

#include <mutex>
#include <vector>

#include "transport/gloo/gloo_call.h"
#include "transport/gloo/gloo_direct.h"

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

// The job's store with waits of its own length: Gloo passes its context timeout to wait(),
// which connect_group sets to the pair timeout. Every read waits first, so that an elastic
// abort key ends it (StoreClient::wait).
class PatientStore : public gloo::rendezvous::Store {
 public:
  PatientStore(gloo::rendezvous::Store& store, std::chrono::milliseconds wait)
      : store_(store), wait_(wait) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(key, data);
  }
  /// Gloo also GETs keys it did not wait for (a peer's addresses): through wait(), which
  /// watches the elastic abort key.
  std::vector<char> get(const std::string& key) override {
    store_.wait({key}, wait_);
    return store_.get(key);
  }
  void wait(const std::vector<std::string>& keys) override { store_.wait(keys, wait_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override {
    store_.wait(keys, wait_);
  }

 private:
  gloo::rendezvous::Store& store_;
  const std::chrono::milliseconds wait_;
};

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

namespace {

// Connects with `pair_timeout` as the pairs' own timeout (the one a synchronous pair keeps for
// its reads), then sets the op timeout for what runs on the context.
Status connect_with(const GlooJob& job, const std::string& prefix, int rank, int size,
                    const std::string& name, std::chrono::milliseconds pair_timeout,
                    std::shared_ptr<gloo::Context>* out) {
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  const std::string call = "connecting (store prefix " + prefix + ")";
  HVD_RETURN_IF_ERROR(gloo_call(name, call.c_str(), [&] {
    PatientStore patient(*job.store, job.connect_timeout);
    gloo::rendezvous::PrefixStore store(prefix, patient);
    ctx->setTimeout(pair_timeout);
    auto device = job.device;
    ctx->connectFullMesh(store, device);
    // From here on a collective that waits longer than this on a peer fails: the peer is
    // taken for lost (Config's op timeout, a few seconds).
    ctx->setTimeout(job.op_timeout);
  }));
  *out = std::move(ctx);
  return Status::OK();
}

}  // namespace

Status connect_group(const GlooJob& job, const std::string& prefix, int rank, int size,
                     const std::string& name, std::shared_ptr<gloo::Context>* out) {
  return connect_with(job, prefix, rank, size, name,
                      job.pair_timeout.count() > 0 ? job.pair_timeout : job.connect_timeout, out);
}

Status connect_direct_links(const GlooJob& job, const std::string& prefix, int rank, int size,
                            const std::string& name, std::unique_ptr<DirectLinks>* out) {
  std::shared_ptr<gloo::Context> ctx;
  HVD_RETURN_IF_ERROR(connect_with(job, prefix, rank, size, name, job.op_timeout, &ctx));
  return gloo_call(name, "switching the direct links to synchronous mode",
                   [&] { *out = std::make_unique<DirectLinks>(std::move(ctx)); });
}

}  // namespace hvd
