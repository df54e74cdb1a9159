// Copyright horovod_cpp authors. Adasum of CUDA tensors (staged to the host and combined there
// by the CPU tensors' code: transport/nccl/nccl_adasum.cc), with the GPU tests under mpirun.
//
// Every rank rebuilds every rank's input, combines them in double by the reference
// (../adasum_reference.h) and checks every element of the result copied back from the device.
// A single tensor must also equal, byte for byte, the same values reduced as a CPU tensor:
// both run the same code on the host. Skipped without a device (test_gpu.cc's listener).
#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "../adasum_reference.h"
#include "gpu_test_util.h"

using hvd::DataType;
using namespace hvdtest;

namespace {

// Rank r's element i of tensor `seed`, in (-1, 1): smooth in i, different per rank and tensor,
// so that the ranks' vectors are neither parallel nor orthogonal.
double input_value(int r, int seed, int64_t i) {
  const double x = static_cast<double>(i + 1);
  return (std::sin(0.37 * x * (r + 2) + 1.3 * seed) + 0.25 * std::cos(0.011 * x * (seed + 1) - r)) /
         1.3;
}

// Every rank's tensor `seed` of `len` elements as `d` holds it (half types rounded).
std::vector<std::vector<double>> every_input(DataType d, int seed, int64_t len) {
  std::vector<std::vector<double>> all(static_cast<size_t>(hvd::size()));
  Buffer b(d, {len});
  for (int r = 0; r < hvd::size(); ++r) {
    for (int64_t i = 0; i < len; ++i) b.set(i, input_value(r, seed, i));
    for (int64_t i = 0; i < len; ++i) all[static_cast<size_t>(r)].push_back(b.get(i));
  }
  return all;
}

// This rank's input out of every_input().
Buffer my_input(DataType d, const std::vector<std::vector<double>>& all) {
  const std::vector<double>& v = all[static_cast<size_t>(hvd::rank())];
  Buffer b(d, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) b.set(static_cast<int64_t>(i), v[i]);
  return b;
}

// Checks every element of `got` against the reference of `all` times `factor`; reports the
// first element out of the dtype's tolerance.
void check_reference(const std::string& what, const Buffer& got,
                     const std::vector<std::vector<double>>& all, double factor = 1) {
  const std::vector<double> want = adasum_ref(all);
  REQUIRE(got.n() == static_cast<int64_t>(want.size()));
  for (int64_t i = 0; i < got.n(); ++i) {
    const double w = want[static_cast<size_t>(i)] * factor;
    if (std::fabs(got.get(i) - w) > adasum_tolerance(got.dtype, w)) {
      FAIL_CHECK(what << ": element " << i << " is " << got.get(i) << ", the reference " << w
                      << " (" << hvd::dtype_name(got.dtype) << ", " << hvd::size() << " ranks)");
      return;
    }
  }
}

hvd::AllreduceOptions adasum(double pre = 1, double post = 1) {
  hvd::AllreduceOptions o;
  o.op = hvd::ReduceOp::kAdasum;
  o.prescale_factor = pre;
  o.postscale_factor = post;
  return o;
}

const std::vector<DataType> kFloats = {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                                       DataType::kFloat64};

}  // namespace

// Lengths on both sides of the 32 KiB at which the host schedule changes (gathered below,
// vector-halving distance-doubling above: transport/cpu/cpu_transport.h).
TEST_CASE("gpu: adasum of single CUDA tensors matches the reference and the CPU bytes",
          "[gpu][adasum]") {
  Session s;
  int seed = 0;
  for (DataType d : kFloats) {
    for (int64_t len : {1, 7, 1000, 4097, 20000}) {
      const auto all = every_input(d, ++seed, len);
      const std::string name =
          std::string("gada.") + hvd::dtype_name(d) + "." + std::to_string(len);
      DeviceBuffer t(my_input(d, all));
      if (!wait_ok(hvd::allreduce_async(name, t.view(), adasum()))) continue;
      const Buffer got = t.download();
      check_reference(name, got, all);
      Buffer cpu = my_input(d, all);
      if (!wait_ok(hvd::allreduce_async(name + ".cpu", cpu.view(), adasum()))) continue;
      CHECK(got.bytes == cpu.bytes);
    }
  }
}

TEST_CASE("gpu: adasum out of place applies prescale and postscale and leaves the input",
          "[gpu][adasum]") {
  Session s;
  for (DataType d : {DataType::kFloat32, DataType::kFloat64}) {
    for (int64_t len : {50, 9000}) {
      const auto all = every_input(d, 40 + static_cast<int>(len), len);
      const std::string name =
          std::string("gada.scaled.") + hvd::dtype_name(d) + "." + std::to_string(len);
      DeviceBuffer in(my_input(d, all));
      DeviceBuffer out(Buffer(d, {len}));
      if (!wait_ok(hvd::allreduce_async(name, in.view(), out.view(), adasum(0.5, 3.0)))) continue;
      check_reference(name, out.download(), all, 1.5);  // homogeneous: the factors multiply
      CHECK(in.download().bytes == my_input(d, all).bytes);
    }
  }
}

TEST_CASE("gpu: adasum of fused CUDA tensors combines each tensor on its own",
          "[gpu][adasum][fusion]") {
  Session s;
  for (DataType d : kFloats) {
    // A group (one fused batch), then tensors submitted one by one in a cycle (fused by it).
    for (bool grouped : {true, false}) {
      std::vector<std::unique_ptr<DeviceBuffer>> bufs;
      std::vector<std::vector<std::vector<double>>> inputs;
      std::vector<std::string> names;
      std::vector<hvd::TensorView> views;
      std::vector<hvd::Handle> handles;
      for (int k = 0; k < 12; ++k) {
        const int64_t len = k == 5 ? 9000 : 3 + 17 * k;
        inputs.push_back(every_input(d, 200 + k, len));
        bufs.push_back(std::make_unique<DeviceBuffer>(my_input(d, inputs.back())));
        names.push_back(std::string("gada.") + (grouped ? "group." : "cycle.") +
                        hvd::dtype_name(d) + "." + std::to_string(k));
        views.push_back(bufs.back()->view());
        if (!grouped) handles.push_back(hvd::allreduce_async(names.back(), views.back(), adasum()));
      }
      if (grouped) handles.push_back(hvd::grouped_allreduce_async(names, views, adasum()));
      bool ok = true;
      for (const hvd::Handle& h : handles) ok = wait_ok(h) && ok;
      if (!ok) continue;
      for (size_t k = 0; k < bufs.size(); ++k)
        check_reference(names[k], bufs[k]->download(), inputs[k]);
    }
  }
}
