// Copyright horovod_cpp authors. Helpers of the GPU tests (test_gpu*.cc): device buffers and
// downloads, checked CUDA calls, the device the library picks for this rank.
#pragma once

#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

#include "test_util.h"

/// A failed CUDA call fails the test case, naming the call.
#define CUDA_OK(call)                                                            \
  do {                                                                           \
    cudaError_t _e = (call);                                                     \
    if (_e != cudaSuccess) FAIL(#call << " failed: " << cudaGetErrorString(_e)); \
  } while (0)

namespace hvdtest {

/// The device the library uses for this rank (common/config.h): HOROVOD_CPP_CUDA_DEVICE,
/// else the local rank, modulo the device count when ranks share GPUs.
inline int my_device() {
  if (const char* d = std::getenv("HOROVOD_CPP_CUDA_DEVICE")) return std::atoi(d);
  int count = 1;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) count = 1;
  const char* shared = std::getenv("NCCL_MULTI_RANK_GPU_ENABLE");
  if (shared != nullptr && std::string(shared) == "1") return hvd::local_rank() % count;
  return hvd::local_rank();
}

/// A device copy of a host Buffer (test_util.h), freed at scope exit.
struct DeviceBuffer {
  Buffer host;
  void* ptr = nullptr;
  explicit DeviceBuffer(const Buffer& b) : host(b) {
    CUDA_OK(cudaSetDevice(my_device()));
    if (!host.bytes.empty()) {
      CUDA_OK(cudaMalloc(&ptr, host.bytes.size()));
      CUDA_OK(cudaMemcpy(ptr, host.bytes.data(), host.bytes.size(), cudaMemcpyHostToDevice));
    }
  }
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  hvd::TensorView view(void* stream = nullptr) {
    hvd::TensorView v(ptr, host.dtype, host.shape, hvd::Device::cuda(my_device()));
    v.stream = stream;
    return v;
  }
  /// The device contents, as a host Buffer.
  Buffer download() {
    Buffer b(host.dtype, host.shape);
    if (!b.bytes.empty())
      CUDA_OK(cudaMemcpy(b.bytes.data(), ptr, b.bytes.size(), cudaMemcpyDeviceToHost));
    return b;
  }
};

/// A library-allocated CUDA result, as a host Buffer.
inline Buffer download(const hvd::Tensor& t) {
  REQUIRE(t.device().is_cuda());
  Buffer b(t.dtype(), t.shape());
  if (!b.bytes.empty())
    CUDA_OK(cudaMemcpy(b.bytes.data(), t.data(), b.bytes.size(), cudaMemcpyDeviceToHost));
  return b;
}

}  // namespace hvdtest
