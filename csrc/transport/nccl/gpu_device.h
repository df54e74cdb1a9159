// Copyright horovod_cpp authors. Which CUDA device a rank uses (no CUDA types here: included
// by api.cc and the process set).
#pragma once

#include "common/config.h"
#include "common/status.h"
#include "horovod_cpp/types.h"

namespace hvd {

/// The CUDA device this rank uses: HOROVOD_CPP_CUDA_DEVICE when set; else local_rank(), or
/// local_rank() modulo the host's device count when NCCL_MULTI_RANK_GPU_ENABLE lets ranks
/// share a GPU.
int chosen_cuda_device(const Config& config, int local_rank);

/// OK when a tensor on `device` may be used by this rank: a CUDA device exists, the chosen one
/// is among them, and `device` is the chosen one. Otherwise a clear message (`what` names the
/// tensor) that says which device to use, or that the host has more ranks than GPUs.
Status check_cuda_tensor_device(const Device& device, const Config& config, int rank,
                                int local_rank, int local_size, const std::string& what);

}  // namespace hvd
