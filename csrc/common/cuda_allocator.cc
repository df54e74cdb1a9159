// Copyright horovod_cpp authors.
#include "common/cuda_allocator.h"

#include <mutex>

namespace hvd {
namespace {

// Process-wide by nature: the memory of a device is shared by every runtime and process set
// of the process, and the allocator may be installed before init().
struct Installed {
  std::mutex mu;
  CudaAllocator allocator;
};

Installed& installed() {
  static Installed* i = new Installed();  // never freed: deleters may run at process exit
  return *i;
}

}  // namespace

void set_cuda_allocator(CudaAllocator allocator) {
  Installed& i = installed();
  std::lock_guard<std::mutex> lk(i.mu);
  i.allocator = std::move(allocator);
}

CudaAllocator installed_cuda_allocator() {
  Installed& i = installed();
  std::lock_guard<std::mutex> lk(i.mu);
  return i.allocator;
}

}  // namespace hvd
