// Copyright horovod_cpp authors.
#include "transport/nccl/gpu_device.h"

#include <cuda_runtime.h>

#include <mutex>
#include <string>

#include "transport/nccl/gpu_check.h"

namespace hvd {
namespace {

// The device count, asked once per process (it does not change while the process runs).
struct DeviceCount {
  int count = 0;
  cudaError_t error = cudaSuccess;
};

const DeviceCount& device_count() {
  static DeviceCount dc;
  static std::once_flag once;
  std::call_once(once, [] {
    dc.error = cudaGetDeviceCount(&dc.count);
    if (dc.error != cudaSuccess) {
      (void)cudaGetLastError();
      dc.count = 0;
    }
  });
  return dc;
}

}  // namespace

int chosen_cuda_device(const Config& config, int local_rank) {
  if (config.cuda_device >= 0) return static_cast<int>(config.cuda_device);
  const DeviceCount& dc = device_count();
  if (config.nccl_multi_rank_gpu && dc.count > 0) return local_rank % dc.count;
  return local_rank;
}

Status check_cuda_tensor_device(const Device& device, const Config& config, int rank,
                                int local_rank, int local_size, const std::string& what) {
  const DeviceCount& dc = device_count();
  const std::string who = "rank " + std::to_string(rank);
  if (dc.error != cudaSuccess) {
    return Status::InvalidArgument(what + ": " + who + " has no usable CUDA device (" +
                                   cuda_error_message(dc.error) + ")");
  }
  if (dc.count == 0) {
    return Status::InvalidArgument(what + ": " + who + " sees no CUDA device");
  }
  const int chosen = chosen_cuda_device(config, local_rank);
  if (chosen >= dc.count) {
    if (config.cuda_device >= 0) {
      return Status::InvalidArgument(what + ": HOROVOD_CPP_CUDA_DEVICE=" +
                                     std::to_string(chosen) + " but " + who + "'s host has " +
                                     std::to_string(dc.count) + " CUDA device(s)");
    }
    return Status::InvalidArgument(
        what + ": " + who + " is local rank " + std::to_string(local_rank) + " of " +
        std::to_string(local_size) + " on its host, which has only " + std::to_string(dc.count) +
        " CUDA device(s): each rank uses the GPU of its local rank; start at most " +
        std::to_string(dc.count) + " ranks per host (or, for testing, share GPUs with NCCL >= "
        "2.30 and NCCL_MULTI_RANK_GPU_ENABLE=1, or choose one with HOROVOD_CPP_CUDA_DEVICE)");
  }
  if (device.index != chosen) {
    return Status::InvalidArgument(
        what + ": the tensor is on " + device.str() + " but " + who + " uses cuda:" +
        std::to_string(chosen) +
        (config.cuda_device >= 0 ? " (HOROVOD_CPP_CUDA_DEVICE)"
                                 : " (its local rank; set HOROVOD_CPP_CUDA_DEVICE to choose another)"));
  }
  return Status::OK();
}

}  // namespace hvd
