// Copyright horovod_cpp authors. hvd_bench --gpu: horovod_cpp on CUDA tensors against raw NCCL
// in the same run (size sweep with a correctness check: gpu_sweep.cc; workloads:
// gpu_workloads.cc). This file chooses the device, prints the header, makes the raw NCCL
// communicator (rank 0's ncclGetUniqueId, MPI_Bcast, ncclCommInitRank: a communicator of the
// benchmark's own, never the library's) and runs the parts.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "benchmarks.h"
#include "gpu_util.h"

namespace bench {

namespace {

int world_rank() {
  int r = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

std::string nccl_version_str(int code) {
  // NCCL_VERSION_CODE: X*1000+Y*100+Z before 2.9, X*10000+Y*100+Z since.
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? code / 100 % 100 : code / 100 % 10;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

std::string cuda_version_str(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

/// The largest number of ranks of `comm` that use one GPU (same host, same device).
int ranks_per_gpu(MPI_Comm comm, int device) {
  struct Where {
    char host[64];
    int device;
  };
  Where mine{};
  if (gethostname(mine.host, sizeof(mine.host) - 1) != 0) std::strcpy(mine.host, "?");
  mine.device = device;
  int n = 1;
  MPI_Comm_size(comm, &n);
  std::vector<Where> all(static_cast<size_t>(n));
  MPI_Allgather(&mine, sizeof(Where), MPI_BYTE, all.data(), sizeof(Where), MPI_BYTE, comm);
  int most = 1;
  for (const Where& a : all) {
    int same = 0;
    for (const Where& b : all) {
      if (a.device == b.device && std::strncmp(a.host, b.host, sizeof(a.host)) == 0) ++same;
    }
    most = std::max(most, same);
  }
  return most;
}

/// --gpu-alloc pool: library-allocated outputs from the device's stream-ordered pool, on the
/// stream the caller submitted with (the benchmark's), kept by the pool between calls.
void install_pool_allocator(int device) {
  cudaMemPool_t pool;
  BENCH_CUDA(cudaDeviceGetDefaultMemPool(&pool, device));
  uint64_t keep = UINT64_MAX;
  BENCH_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  hvd::set_cuda_allocator([](size_t bytes, int dev, void* stream) -> std::shared_ptr<void> {
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    void* p = nullptr;
    int prev = -1;  // runs on a library thread: leave its current device as it was
    const bool ok = cudaGetDevice(&prev) == cudaSuccess && cudaSetDevice(dev) == cudaSuccess &&
                    cudaMallocAsync(&p, bytes, s) == cudaSuccess;
    if (prev >= 0) (void)cudaSetDevice(prev);
    if (!ok) {
      (void)cudaGetLastError();
      return nullptr;  // the library fails the collective, naming the size
    }
    return std::shared_ptr<void>(p, [s](void* q) { (void)cudaFreeAsync(q, s); });
  });
}

}  // namespace

void cuda_check(cudaError_t e, const char* call, const char* file, int line) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();
  throw std::runtime_error("rank " + std::to_string(world_rank()) + ": " + call + " failed: " +
                           cudaGetErrorName(e) + ": " + cudaGetErrorString(e) + " (" + file +
                           ":" + std::to_string(line) + ")");
}

void nccl_check(ncclResult_t r, const char* call, const char* file, int line) {
  if (r == ncclSuccess) return;
  std::string last;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  if (const char* l = ncclGetLastError(nullptr); l && *l) last = std::string(" (") + l + ")";
#endif
  throw std::runtime_error("rank " + std::to_string(world_rank()) + ": " + call + " failed: " +
                           ncclGetErrorString(r) + last + " (" + file + ":" +
                           std::to_string(line) + ")");
}

DevBuf device_alloc(int64_t n) {
  void* p = nullptr;
  BENCH_CUDA(cudaMalloc(&p, static_cast<size_t>(std::max<int64_t>(1, n)) * sizeof(float)));
  return DevBuf(static_cast<float*>(p), [](float* q) { (void)cudaFree(q); });
}

hvd::TensorView Gpu::view(float* p, int64_t count) const {
  hvd::TensorView v(p, hvd::DataType::kFloat32, {count}, hvd::Device::cuda(device));
  v.stream = stream;
  return v;
}

void Gpu::sync() const { BENCH_CUDA(cudaStreamSynchronize(stream)); }

float* Gpu::host_input(int64_t count) const {
  scratch->in.resize(static_cast<size_t>(count));
  return scratch->in.data();
}

void Gpu::upload(float* dst, int64_t count) const {
  BENCH_CUDA(cudaMemcpyAsync(dst, scratch->in.data(), static_cast<size_t>(count) * sizeof(float),
                             cudaMemcpyHostToDevice, stream));
  sync();
}

float* Gpu::download(const void* src, int64_t count) const {
  scratch->out.resize(static_cast<size_t>(count));
  // cudaMemcpyDefault: `src` may be any memory the library returned (it should be this GPU's).
  BENCH_CUDA(cudaMemcpyAsync(scratch->out.data(), src, static_cast<size_t>(count) * sizeof(float),
                             cudaMemcpyDefault, stream));
  sync();
  return scratch->out.data();
}

int gpu_prepare(MPI_Comm comm, int* device) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm local;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
  int local_rank = 0, local_size = 1;
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_size(local, &local_size);
  MPI_Comm_free(&local);

  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    count = 0;
  }
  const char* env = std::getenv("HOROVOD_CPP_CUDA_DEVICE");
  const char* share = std::getenv("NCCL_MULTI_RANK_GPU_ENABLE");
  const bool sharing = share && (std::strcmp(share, "1") == 0 || std::strcmp(share, "true") == 0);
  int status = -1;  // -1: usable
  std::string why;
  *device = -1;
  if (!hvd::cuda_built() || !hvd::nccl_built()) {
    status = 77;
    why = "the horovod_cpp library was built without CUDA or NCCL";
  } else if (count == 0) {
    status = 77;
    why = std::string("no usable CUDA device (") +
          (e != cudaSuccess ? cudaGetErrorString(e) : "the device count is 0") + ")";
  } else if (env && *env) {
    char* end = nullptr;
    const long d = std::strtol(env, &end, 10);
    if (*end != '\0' || d < 0 || d >= count) {
      status = 2;
      why = std::string("HOROVOD_CPP_CUDA_DEVICE=") + env + " but this host has " +
            std::to_string(count) + " CUDA device(s)";
    } else {
      *device = static_cast<int>(d);
    }
  } else if (local_size > count && !sharing) {
    status = 2;
    why = std::to_string(local_size) + " ranks on this host but " + std::to_string(count) +
          " CUDA device(s): start at most one rank per GPU, or (for correctness only, NCCL >= "
          "2.30) set NCCL_MULTI_RANK_GPU_ENABLE=1 or HOROVOD_CPP_CUDA_DEVICE";
  } else {
    *device = local_rank % count;  // the library's choice too (docs/gpu.md, "Which GPU")
  }
  if (status < 0) {
    const cudaError_t se = cudaSetDevice(*device);
    if (se != cudaSuccess) {
      (void)cudaGetLastError();
      status = 77;
      why = "cudaSetDevice(" + std::to_string(*device) + "): " + cudaGetErrorString(se);
    }
  }
  // Every rank ends alike: 77 (skip) wins over 2 (bad setup) over -1 (go on).
  int verdict = status;
  MPI_Allreduce(&status, &verdict, 1, MPI_INT, MPI_MAX, comm);
  if (status >= 0) {
    std::fprintf(stderr, "hvd_bench: --gpu: rank %d: %s\n", rank, why.c_str());
  }
  if (verdict >= 0 && rank == 0) {
    std::fflush(stderr);
    std::printf("hvd_bench: --gpu: %s\n", verdict == 77 ? "SKIPPED (no usable CUDA device on some "
                                                          "rank; exit 77)"
                                                        : "cannot run (see above; exit 2)");
    std::fflush(stdout);
  }
  return verdict;
}

int64_t run_gpu(const Options& opts, MPI_Comm comm, int device, Json* meta, Json* sweep,
                Json* workloads) {
  Gpu g;
  g.device = device;
  g.comm = comm;
  g.corrupt = opts.corrupt;
  MPI_Comm_rank(comm, &g.rank);
  MPI_Comm_size(comm, &g.n);
  BENCH_CUDA(cudaSetDevice(device));

  cudaDeviceProp prop;
  BENCH_CUDA(cudaGetDeviceProperties(&prop, device));
  int runtime = 0, driver = 0, nccl_code = 0;
  BENCH_CUDA(cudaRuntimeGetVersion(&runtime));
  BENCH_CUDA(cudaDriverGetVersion(&driver));
  BENCH_NCCL(ncclGetVersion(&nccl_code));
  const int sharing = ranks_per_gpu(comm, device);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
  const char* a2a = "ncclAlltoAll";
#else
  const char* a2a = "grouped ncclSend/ncclRecv";
#endif
  if (g.rank == 0) {
    std::printf("# GPU mode: %s (cuda:%d of rank 0, sm_%d%d, %.0f GiB, %d SMs) | CUDA runtime %s, "
                "driver %s | NCCL %s (headers %s) | %d rank(s) per GPU\n",
                prop.name, device, prop.major, prop.minor,
                static_cast<double>(prop.totalGlobalMem) / (1 << 30), prop.multiProcessorCount,
                cuda_version_str(runtime).c_str(), cuda_version_str(driver).c_str(),
                nccl_version_str(nccl_code).c_str(), nccl_version_str(NCCL_VERSION_CODE).c_str(),
                sharing);
    std::printf("# a step: call -> result usable on the host. ours: CUDA tensors on the "
                "benchmark's stream, then Handle::wait()/result(); raw NCCL: the call(s), then "
                "cudaStreamSynchronize. Library-allocated outputs of ours: %s; raw NCCL writes "
                "into buffers allocated once. Raw alltoall: %s.\n",
                opts.gpu_alloc == "pool" ? "cudaMallocAsync pool (--gpu-alloc pool)"
                                         : "the library's cudaMalloc/cudaFree per call",
                a2a);
    if (sharing > 1) {
      std::printf("# WARNING: %d ranks share a GPU (time-sliced): these timings say nothing "
                  "about bandwidth or latency; use them for correctness only\n", sharing);
    }
    std::fflush(stdout);
  }
  meta->set("gpu", prop.name).set("gpu_device", device);
  meta->set("gpu_sm", std::to_string(prop.major) + std::to_string(prop.minor));
  meta->set("cuda_runtime", cuda_version_str(runtime)).set("cuda_driver", cuda_version_str(driver));
  meta->set("nccl_version", nccl_version_str(nccl_code));
  meta->set("nccl_headers", nccl_version_str(NCCL_VERSION_CODE));
  meta->set("ranks_per_gpu", sharing).set("gpu_alloc", opts.gpu_alloc).set("nccl_alltoall", a2a);

  if (sharing > 1) {
    // As the library does for its own communicators (nccl_comms.cc): NCCL >= 2.30 runs several
    // ranks on one GPU only with this set, read when a communicator is made.
    setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", 0);
  }
  BENCH_CUDA(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
  if (opts.gpu_alloc == "pool") install_pool_allocator(device);
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (g.rank == 0) BENCH_NCCL(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm);
  BENCH_NCCL(ncclCommInitRank(&g.nccl, g.n, id, g.rank));

  int64_t wrong = 0;
  try {
    if (!opts.ops.empty()) wrong += run_sweep_with(opts, comm, nccl_baseline(g), sweep);
    if (!opts.workloads.empty()) wrong += run_gpu_workloads(opts, g, workloads);
  } catch (...) {
    // Another rank may be stuck in a collective of this communicator: abort, never wait.
    (void)ncclCommAbort(g.nccl);
    throw;
  }
  // Every result of ours and every buffer is gone by now (they live in the cases).
  if (opts.gpu_alloc == "pool") hvd::set_cuda_allocator({});
  BENCH_CUDA(cudaStreamSynchronize(g.stream));
  BENCH_NCCL(ncclCommDestroy(g.nccl));
  BENCH_CUDA(cudaStreamDestroy(g.stream));
  return wrong;
}

}  // namespace bench
