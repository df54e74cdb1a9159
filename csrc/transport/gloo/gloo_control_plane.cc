// Copyright horovod_cpp authors.
#include "transport/gloo/gloo_control_plane.h"

#include <gloo/context.h>

#include "transport/gloo/gloo_call.h"
#include "transport/gloo/gloo_direct.h"
#include "transport/gloo/gloo_exchange.h"

namespace hvd {
namespace {

// Slots of the negotiation's exchanges (Gloo's own collectives use prefixes 0x01-0x08; this
// context runs nothing else).
constexpr uint8_t kGatherSlotPrefix = 0x10;
constexpr uint8_t kBroadcastSlotPrefix = 0x11;
constexpr uint8_t kAndSlotPrefix = 0x12;

void and_words(char* out, const char* a, const char* b, size_t bytes) {
  auto* o = reinterpret_cast<uint64_t*>(out);
  const auto* x = reinterpret_cast<const uint64_t*>(a);
  const auto* y = reinterpret_cast<const uint64_t*>(b);
  for (size_t i = 0; i < bytes / sizeof(uint64_t); ++i) o[i] = x[i] & y[i];
}

}  // namespace

GlooControlPlane::GlooControlPlane(std::shared_ptr<gloo::Context> ctx, std::string group,
                                   std::unique_ptr<DirectLinks> direct)
    : ctx_(std::move(ctx)),
      direct_(std::move(direct)),
      group_(std::move(group)),
      rank_(ctx_->rank),
      size_(ctx_->size) {}

GlooControlPlane::~GlooControlPlane() = default;

Status GlooControlPlane::allreduce_and(std::vector<uint64_t>* words) {
  if (size_ == 1 || words->empty()) return Status::OK();
  return gloo_call(group_, "coordination bit vector exchange (gloo allreduce)", [&] {
    char* const buf = reinterpret_cast<char*>(words->data());
    const size_t bytes = words->size() * sizeof(uint64_t);
    if (direct_ && bytes <= DirectLinks::kMaxBytes) {
      direct_allreduce(*direct_, buf, bytes, &and_words);
    } else {
      recursive_doubling_allreduce(*ctx_, kAndSlotPrefix, buf, bytes, &scratch_, &and_words);
    }
  });
}

Status GlooControlPlane::gather(const std::string& mine, std::vector<std::string>* all) {
  if (size_ == 1) {
    all->assign(1, mine);
    return Status::OK();
  }
  return gloo_call(group_, "negotiation gather (gloo point to point)", [&] {
    flat_gather(*ctx_, direct_.get(), kGatherSlotPrefix, mine, all, &scratch_);
  });
}

Status GlooControlPlane::broadcast(std::string* blob) {
  if (size_ == 1) return Status::OK();
  return gloo_call(group_, "negotiation broadcast (gloo)", [&] {
    flat_broadcast(*ctx_, direct_.get(), kBroadcastSlotPrefix, 0, blob, &scratch_);
  });
}

}  // namespace hvd
