// Copyright horovod_cpp authors. The allocator for library-allocated CUDA outputs
// (hvd::set_cuda_allocator in horovod_cpp/api.h; the type is in options.h), read by the CUDA
// transport.
#pragma once

#include "horovod_cpp/options.h"

namespace hvd {

/// The allocator installed by set_cuda_allocator(); an empty function when none is (the
/// transport then uses its own stream-ordered pool). Thread-safe; returns a copy, so a collective
/// keeps the allocator it started with.
CudaAllocator installed_cuda_allocator();

}  // namespace hvd
