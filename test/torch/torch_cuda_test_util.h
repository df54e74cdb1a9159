// Copyright horovod_cpp authors. Helpers shared by the LibTorch adapter's CUDA test files
// (test_torch_cuda.cc: the device check and the collectives; test_torch_cuda_training.cc:
// DistributedOptimizer, sparse gradients and the broadcasts of modules and optimizer state).
#pragma once

#include <c10/cuda/CUDACachingAllocator.h>
#include <mpi.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "horovod_cpp/torch.h"
#include "torch_test_util.h"

namespace hvdtorchcudatest {

inline constexpr std::chrono::milliseconds kTimeout(120000);

/// This rank's CUDA device, chosen by the skip listener (test_torch_cuda.cc) before any test.
inline int g_device = -1;

using hvdtorchtest::Session;

inline at::Device dev() {
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(g_device));
}

inline hvd::DistributedOptions dist_opts() {
  return hvdtorchtest::dist_opts_with(kTimeout);
}

// Integers in [-8, 8] on the host, seeded by (seed, rank r): sums over a few ranks are exact in
// float16 and float32.
inline at::Tensor ints_of(int r, at::IntArrayRef shape, uint64_t seed, at::ScalarType dtype) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed * 1000 + static_cast<uint64_t>(r));
  return at::randint(-8, 9, shape, gen, at::kFloat).to(dtype);
}

// Element-by-element equality of a result on this rank's device with a host expectation.
inline void check_equal(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  INFO(what << " on rank " << hvd::rank());
  REQUIRE(got.device() == dev());
  REQUIRE(got.scalar_type() == want.scalar_type());
  REQUIRE(got.sizes().vec() == want.sizes().vec());
  const at::Tensor g = got.cpu().reshape({-1}), w = want.cpu().reshape({-1});
  const at::Tensor bad = g.ne(w).nonzero();
  if (bad.size(0) > 0) {
    const int64_t i = bad[0][0].item<int64_t>();
    INFO(bad.size(0) << " element(s) differ; the first, element " << i << ": got "
                     << g[i].to(at::kDouble).item<double>() << ", want "
                     << w[i].to(at::kDouble).item<double>());
    CHECK(bad.size(0) == 0);
  }
}

// |got - want| <= atol + rtol * max|want|, computed in double on the host.
inline void check_close(const at::Tensor& got, const at::Tensor& want, double rtol, double atol,
                        const std::string& what) {
  const at::Tensor g = got.detach().cpu().to(at::kDouble), w = want.detach().cpu().to(at::kDouble);
  const double err = (g - w).abs().max().item<double>();
  const double scale = w.abs().max().item<double>();
  INFO(what << ": max abs difference " << err << " (max |value| " << scale << ") on rank "
            << hvd::rank());
  CHECK(err <= atol + rtol * scale);
}

// True when `t` is bit-identical to rank 0's `t`; the comparison itself goes through the GPU.
inline bool identical_on_all_ranks(const at::Tensor& t, const std::string& name) {
  at::Tensor root = t.detach().clone().contiguous();
  hvd::broadcast(name, hvd::torch::view(root), 0);
  return ::torch::equal(root, t);
}

// Max |t - rank 0's t|: for results whose last bits may differ across ranks (the CUDA update
// by a sparse gradient with repeated rows adds them with atomics, in no fixed order).
inline double spread_from_root(const at::Tensor& t, const std::string& name) {
  at::Tensor root = t.detach().clone().contiguous();
  hvd::broadcast(name, hvd::torch::view(root), 0);
  return (root - t).abs().max().item<double>();
}

// Bytes LibTorch's caching allocator has handed out on this rank's device.
inline int64_t torch_allocated_bytes() {
  return c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(g_device))
      .allocated_bytes[0]  // the aggregate over pools
      .current;
}

inline at::Tensor flat_params(const ::torch::nn::Module& m) {
  std::vector<at::Tensor> v;
  for (const auto& p : m.parameters()) v.push_back(p.detach().reshape({-1}));
  return ::torch::cat(v);
}

}  // namespace hvdtorchcudatest
