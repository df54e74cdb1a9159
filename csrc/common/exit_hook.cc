// Copyright horovod_cpp authors.
#include "common/exit_hook.h"

#include <atomic>

namespace hvd {
namespace {
std::atomic<void (*)()> g_shutdown{nullptr};
}  // namespace

void set_library_shutdown(void (*shutdown)()) {
  g_shutdown.store(shutdown);
}

void run_library_shutdown() {
  if (auto fn = g_shutdown.load()) fn();
}

}  // namespace hvd
