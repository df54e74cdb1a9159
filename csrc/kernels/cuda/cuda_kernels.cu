// Copyright horovod_cpp authors. CUDA kernels of the GPU data plane (see cuda_kernels.h).
#include "kernels/cuda/cuda_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

namespace hvd {
namespace cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocksX = 4096;

// The items of one launch, passed by value as the kernel parameter (under 1 KiB, well inside
// the 4 KiB parameter limit of every architecture).
struct LaunchItems {
  const void* src[kMaxItemsPerLaunch];
  void* dst[kMaxItemsPerLaunch];
  int64_t count[kMaxItemsPerLaunch];
};

// Element conversions to the type the scaling is computed in.
__device__ __forceinline__ float to_compute(float x) { return x; }
__device__ __forceinline__ double to_compute(double x) { return x; }
__device__ __forceinline__ float to_compute(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_compute(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
struct Store;
template <>
struct Store<float> {
  __device__ static float from(float x) { return x; }
};
template <>
struct Store<double> {
  __device__ static double from(double x) { return x; }
};
template <>
struct Store<__half> {
  __device__ static __half from(float x) { return __float2half_rn(x); }
};
template <>
struct Store<__nv_bfloat16> {
  __device__ static __nv_bfloat16 from(float x) { return __float2bfloat16_rn(x); }
};

// blockIdx.y selects the item; the x dimension strides over its elements.
template <typename T, typename C>
__global__ void scale_copy_kernel(LaunchItems items, C scale) {
  const int k = blockIdx.y;
  const T* src = static_cast<const T*>(items.src[k]);
  T* dst = static_cast<T*>(items.dst[k]);
  const int64_t n = items.count[k];
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    dst[i] = Store<T>::from(static_cast<C>(to_compute(src[i]) * scale));
  }
}

// A plain copy, on words of the element's size.
template <typename W>
__global__ void copy_kernel(LaunchItems items) {
  const int k = blockIdx.y;
  const W* src = static_cast<const W*>(items.src[k]);
  W* dst = static_cast<W*>(items.dst[k]);
  const int64_t n = items.count[k];
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    dst[i] = src[i];
  }
}

template <typename T>
__global__ void divide_kernel(T* buf, int64_t n, int divisor) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    buf[i] = static_cast<T>(buf[i] / static_cast<T>(divisor));  // C++ division truncates toward 0
  }
}

dim3 grid_for(int64_t max_count, unsigned items) {
  int64_t blocks = (max_count + kThreads - 1) / kThreads;
  blocks = std::max<int64_t>(1, std::min(blocks, kMaxBlocksX));
  return dim3(static_cast<unsigned>(blocks), items, 1);
}

bool is_float(DataType d) {
  return d == DataType::kFloat16 || d == DataType::kBFloat16 || d == DataType::kFloat32 ||
         d == DataType::kFloat64;
}

int launch(const LaunchItems& li, unsigned n, int64_t max_count, DataType dtype, double scale,
           cudaStream_t s) {
  const dim3 grid = grid_for(max_count, n);
  const bool scaled = is_float(dtype) && scale != 1.0;
  if (scaled) {
    switch (dtype) {
      case DataType::kFloat16:
        scale_copy_kernel<__half, float><<<grid, kThreads, 0, s>>>(li, static_cast<float>(scale));
        break;
      case DataType::kBFloat16:
        scale_copy_kernel<__nv_bfloat16, float><<<grid, kThreads, 0, s>>>(li, static_cast<float>(scale));
        break;
      case DataType::kFloat32:
        scale_copy_kernel<float, float><<<grid, kThreads, 0, s>>>(li, static_cast<float>(scale));
        break;
      default:
        scale_copy_kernel<double, double><<<grid, kThreads, 0, s>>>(li, scale);
        break;
    }
  } else {
    if (scale != 1.0) return static_cast<int>(cudaErrorInvalidValue);  // scaling an integer type
    switch (dtype_size(dtype)) {
      case 1: copy_kernel<uint8_t><<<grid, kThreads, 0, s>>>(li); break;
      case 2: copy_kernel<uint16_t><<<grid, kThreads, 0, s>>>(li); break;
      case 4: copy_kernel<uint32_t><<<grid, kThreads, 0, s>>>(li); break;
      case 8: copy_kernel<unsigned long long><<<grid, kThreads, 0, s>>>(li); break;
      default: return static_cast<int>(cudaErrorInvalidValue);
    }
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int batched_copy_scale(const CopyItem* items, size_t n, DataType dtype, double scale, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  size_t i = 0;
  while (i < n) {
    LaunchItems li{};
    unsigned k = 0;
    int64_t max_count = 0;
    for (; i < n && k < kMaxItemsPerLaunch; ++i) {
      if (items[i].count <= 0) continue;  // nothing to copy; keeps the launch grid tight
      if (items[i].src == items[i].dst && (!is_float(dtype) || scale == 1.0)) continue;
      li.src[k] = items[i].src;
      li.dst[k] = items[i].dst;
      li.count[k] = items[i].count;
      max_count = std::max(max_count, items[i].count);
      ++k;
    }
    if (k == 0) continue;
    const int rc = launch(li, k, max_count, dtype, scale, s);
    if (rc != 0) return rc;
  }
  return 0;
}

int scale_in_place(void* buf, int64_t count, DataType dtype, double scale, void* stream) {
  if (!is_float(dtype)) return static_cast<int>(cudaErrorInvalidValue);
  if (scale == 1.0 || count <= 0) return 0;
  CopyItem item{buf, buf, count};
  return batched_copy_scale(&item, 1, dtype, scale, stream);
}

int divide_integers(void* buf, int64_t count, DataType dtype, int divisor, void* stream) {
  if (divisor == 0) return static_cast<int>(cudaErrorInvalidValue);
  if (count <= 0 || divisor == 1) return 0;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const dim3 grid = grid_for(count, 1);
  switch (dtype) {
    case DataType::kUInt8: divide_kernel<uint8_t><<<grid, kThreads, 0, s>>>(static_cast<uint8_t*>(buf), count, divisor); break;
    case DataType::kInt8: divide_kernel<int8_t><<<grid, kThreads, 0, s>>>(static_cast<int8_t*>(buf), count, divisor); break;
    case DataType::kInt16: divide_kernel<int16_t><<<grid, kThreads, 0, s>>>(static_cast<int16_t*>(buf), count, divisor); break;
    case DataType::kUInt16: divide_kernel<uint16_t><<<grid, kThreads, 0, s>>>(static_cast<uint16_t*>(buf), count, divisor); break;
    case DataType::kInt32: divide_kernel<int32_t><<<grid, kThreads, 0, s>>>(static_cast<int32_t*>(buf), count, divisor); break;
    case DataType::kInt64: divide_kernel<long long><<<grid, kThreads, 0, s>>>(static_cast<long long*>(buf), count, divisor); break;
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaGetLastError());
}

std::string cuda_error_text(int code) {
  const cudaError_t e = static_cast<cudaError_t>(code);
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

}  // namespace cuda
}  // namespace hvd
