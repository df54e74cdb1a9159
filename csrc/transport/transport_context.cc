// Copyright horovod_cpp authors.
#include "transport/transport_context.h"

#include <algorithm>

namespace hvd {

int test_host(const TransportContext& ctx) {
  const int64_t per = ctx.config->test_ranks_per_host;
  if (per <= 0) return -1;
  const int global = ctx.layout.global_ranks[static_cast<size_t>(ctx.layout.rank)];
  if (ctx.config->test_hosts_round_robin) {
    return global % std::max(1, static_cast<int>(ctx.world_size / per));
  }
  return static_cast<int>(global / per);
}

Status split_by_host(Bootstrap& group, int host, std::unique_ptr<Bootstrap>* local) {
  if (host >= 0) return group.split(host, group.rank(), local);
  return group.split_host(local);
}

}  // namespace hvd
