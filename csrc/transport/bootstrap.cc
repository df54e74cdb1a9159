// Copyright horovod_cpp authors.
#include "transport/bootstrap.h"

#include <vector>

namespace hvd {

bool all_agree(Bootstrap& group, bool ok) {
  const unsigned char mine = ok ? 1 : 0;
  std::vector<unsigned char> all(static_cast<size_t>(group.size()), 0);
  if (!group.allgather(&mine, 1, all.data()).ok()) return false;
  for (unsigned char v : all) {
    if (v != 1) return false;
  }
  return true;
}

}  // namespace hvd
