// Copyright horovod_cpp authors. The LibTorch adapter (horovod_cpp/torch.h): tensor views and
// dtypes, results as tensors, and the broadcasts of modules and optimizer state (the
// DistributedOptimizer is optimizer.cc). A broadcast's buffers are owned here until it
// finishes: a timed-out wait parks them (csrc/training/in_flight.h) instead of freeing them.
#include "horovod_cpp/torch.h"

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "torch_ops.h"
#include "training/in_flight.h"

// CUDA tensors: only when LibTorch has CUDA and horovod_cpp was built with it (CMake defines
// the macro then; see adapters/torch/CMakeLists.txt).
#if HOROVOD_CPP_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace hvd {
namespace torch {

namespace {

#if HOROVOD_CPP_TORCH_CUDA
// Makes LibTorch's CUDA caching allocator the library's allocator for the CUDA outputs it
// allocates (allgather, alltoall, reducescatter), once per process, the first time the
// adapter sees a CUDA tensor: results then come from torch's memory pool, as every other torch
// tensor does, instead of cudaMalloc/cudaFree per collective. The memory is allocated for the
// producer's stream (the one view() recorded); the library orders its own stream after it.
void install_torch_cuda_allocator() {
  static std::once_flag once;
  std::call_once(once, [] {
    set_cuda_allocator([](size_t bytes, int device, void* stream) -> std::shared_ptr<void> {
      // raw_alloc_with_stream allocates on the current device.
      c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
      void* p = c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(
          bytes, static_cast<cudaStream_t>(stream));
      if (!p) return nullptr;
      return std::shared_ptr<void>(p, [](void* q) {
        // Runs on whichever thread drops the last reference; nothing can be reported from here.
        try {
          c10::cuda::CUDACachingAllocator::raw_delete(q);
        } catch (...) {
        }
      });
    });
  });
}
#endif

// optimizer_state_key(): a template, so that only the branch of this LibTorch's key type is
// compiled.
template <typename Key>
Key state_key_of(c10::TensorImpl* impl) {
  if constexpr (std::is_same<Key, std::string>::value) {
    std::ostringstream os;
    os << impl;  // what LibTorch 1.x's c10::guts::to_string(impl) writes
    return os.str();
  } else {
    return static_cast<Key>(impl);
  }
}

#if !HOROVOD_CPP_TORCH_CUDA
[[noreturn]] void throw_no_cuda(const std::string& who, const std::string& what) {
  throw InvalidArgumentError(
      "horovod_cpp: " + who + " of " + what +
      ": this LibTorch / horovod_cpp build has no CUDA support (the LibTorch adapter "
      "handles CUDA tensors when LibTorch has CUDA and horovod_cpp is built with CUDA)");
}
#endif

}  // namespace

bool has_cuda_support() {
#if HOROVOD_CPP_TORCH_CUDA
  return true;
#else
  return false;
#endif
}

DataType to_hvd_dtype(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Byte: return DataType::kUInt8;
    case c10::ScalarType::Char: return DataType::kInt8;
    case c10::ScalarType::Short: return DataType::kInt16;
    case c10::ScalarType::Int: return DataType::kInt32;
    case c10::ScalarType::Long: return DataType::kInt64;
    case c10::ScalarType::Half: return DataType::kFloat16;
    case c10::ScalarType::BFloat16: return DataType::kBFloat16;
    case c10::ScalarType::Float: return DataType::kFloat32;
    case c10::ScalarType::Double: return DataType::kFloat64;
    case c10::ScalarType::Bool: return DataType::kBool;
    default:
      throw InvalidArgumentError(std::string("horovod_cpp: LibTorch dtype ") + c10::toString(type) +
                                 " is not supported");
  }
}

static c10::ScalarType to_torch_dtype(DataType t) {
  switch (t) {
    case DataType::kUInt8: return c10::ScalarType::Byte;
    case DataType::kInt8: return c10::ScalarType::Char;
    case DataType::kInt16: return c10::ScalarType::Short;
    case DataType::kInt32: return c10::ScalarType::Int;
    case DataType::kInt64: return c10::ScalarType::Long;
    case DataType::kFloat16: return c10::ScalarType::Half;
    case DataType::kBFloat16: return c10::ScalarType::BFloat16;
    case DataType::kFloat32: return c10::ScalarType::Float;
    case DataType::kFloat64: return c10::ScalarType::Double;
    case DataType::kBool: return c10::ScalarType::Bool;
    case DataType::kUInt16: break;  // LibTorch 1.13 has no uint16
  }
  throw InvalidArgumentError(std::string("horovod_cpp: no LibTorch dtype for ") + dtype_name(t));
}

TensorView view(const at::Tensor& t) {
  if (!t.defined()) throw InvalidArgumentError("horovod_cpp: undefined tensor");
  if (t.is_sparse()) throw InvalidArgumentError("horovod_cpp: view() of a sparse tensor");
  // Built only for an error: view() runs once per tensor per step.
  auto what = [&t] { return "a tensor of shape " + detail::sizes_str(t) + " on " + t.device().str(); };
  if (!t.device().is_cpu() && !t.device().is_cuda()) {
    throw InvalidArgumentError("horovod_cpp: view() of " + what() +
                               ": only CPU and CUDA tensors are supported");
  }
  if (!t.is_contiguous()) throw InvalidArgumentError("horovod_cpp: view() of a non-contiguous tensor");
  TensorView v(t.data_ptr(), to_hvd_dtype(t.scalar_type()),
               Shape(t.sizes().begin(), t.sizes().end()));
  if (t.device().is_cuda()) {
#if HOROVOD_CPP_TORCH_CUDA
    install_torch_cuda_allocator();
    const c10::DeviceIndex index = t.device().index();
    v.device = Device::cuda(static_cast<int>(index));
    // torch's current stream: the library's stream waits for the work already queued there
    // (the kernels that produced the data), so the caller need not synchronize.
    v.stream = static_cast<void*>(c10::cuda::getCurrentCUDAStream(index).stream());
#else
    throw_no_cuda("view()", what());
#endif
  }
  return v;
}

OptimizerStateKey optimizer_state_key(const at::Tensor& param) {
  return state_key_of<OptimizerStateKey>(param.unsafeGetTensorImpl());
}

at::Tensor to_torch(const Tensor& tensor) {
  std::vector<int64_t> sizes(tensor.shape().begin(), tensor.shape().end());
  auto opts = at::TensorOptions().dtype(to_torch_dtype(tensor.dtype()));
  if (tensor.device().is_cuda()) {
#if HOROVOD_CPP_TORCH_CUDA
    opts = opts.device(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(tensor.device().index)));
#else
    throw_no_cuda("to_torch()", "a result of shape " + shape_str(tensor.shape()) + " on " +
                                    tensor.device().str());
#endif
  }
  if (tensor.numel() == 0) return at::empty(sizes, opts);
  // No copy, on the CPU as on a GPU (there the memory comes from torch's caching allocator, see
  // install_torch_cuda_allocator): the torch tensor shares the result's memory and keeps it
  // alive, as the Python adapter's tensors do (DLPack). A copy (clone()) of a 16 MiB CPU result
  // took 1.8 ms, 8.9 ms while the caller still held the previous one (fresh pages), against
  // 2.5 ms for the 2-rank allgather that made it.
  Tensor keep = tensor;
  return at::from_blob(
      const_cast<void*>(tensor.data()), sizes, [keep](void*) mutable { keep = Tensor(); }, opts);
}

// ------------------------------------------------------------------------------------------
// Broadcasts

namespace {
std::atomic<uint64_t> g_bcast_counter{0};

// Moves the optimizer state of each parameter (loaded onto the CPU) to that parameter's
// device, whatever the optimizer: through the state's own serialization, mapped to the device.
void move_state_to_parameters(::torch::optim::Optimizer& optimizer,
                              const std::vector<at::Tensor>& params) {
  for (const auto& p : params) {
    if (p.device().is_cpu()) continue;
    auto it = optimizer.state().find(optimizer_state_key(p));
    if (it == optimizer.state().end()) continue;
    ::torch::serialize::OutputArchive out;
    it->second->serialize(out);
    std::string bytes;
    out.save_to([&bytes](const void* data, size_t n) -> size_t {
      bytes.append(static_cast<const char*>(data), n);
      return n;
    });
    ::torch::serialize::InputArchive in;
    in.load_from(bytes.data(), bytes.size(), p.device());
    it->second->serialize(in);
  }
}
}  // namespace

void broadcast_parameters(const ::torch::OrderedDict<std::string, at::Tensor>& named_tensors, int root_rank,
                          std::chrono::milliseconds timeout) {
  std::vector<std::pair<std::string, std::string>> desc;
  for (const auto& item : named_tensors) {
    desc.emplace_back(item.key(), "shape " + detail::sizes_str(item.value()) + " " + c10::toString(item.value().scalar_type()));
  }
  check_consistent_across_ranks(desc, "hvd::torch::broadcast_parameters", "tensor", timeout);
  ::torch::NoGradGuard no_grad;
  std::vector<Handle> hs;
  std::vector<std::pair<at::Tensor, at::Tensor>> bufs;  // (target, contiguous buffer: maybe the target)
  for (const auto& item : named_tensors) {
    at::Tensor t = item.value();
    at::Tensor buf = t.is_contiguous() ? t : t.contiguous();
    bufs.emplace_back(t, buf);
    hs.push_back(broadcast_async("broadcast_parameters." + item.key(), view(buf), root_rank));
  }
  ::hvd::detail::wait_all_or_park(hs, timeout, bufs);
  for (auto& tb : bufs) {
    if (!tb.second.is_same(tb.first)) tb.first.copy_(tb.second);
  }
}

void broadcast_parameters(const ::torch::nn::Module& module, int root_rank, std::chrono::milliseconds timeout) {
  ::torch::OrderedDict<std::string, at::Tensor> all;
  for (const auto& item : module.named_parameters(true)) all.insert("param:" + item.key(), item.value());
  for (const auto& item : module.named_buffers(true)) all.insert("buffer:" + item.key(), item.value());
  broadcast_parameters(all, root_rank, timeout);
}

void broadcast_optimizer_state(::torch::optim::Optimizer& optimizer, int root_rank, std::chrono::milliseconds timeout) {
  // The groups must line up across ranks.
  std::vector<std::pair<std::string, std::string>> desc;
  size_t g = 0;
  for (auto& group : optimizer.param_groups()) {
    size_t i = 0;
    for (auto& p : group.params()) {
      desc.emplace_back("param_group." + std::to_string(g) + "." + std::to_string(i++),
                        "shape " + detail::sizes_str(p) + " " + c10::toString(p.scalar_type()));
    }
    ++g;
  }
  check_consistent_across_ranks(desc, "hvd::torch::broadcast_optimizer_state", "optimizer parameter", timeout);

  // Root serializes state and group options; the others load them.
  const uint64_t id = g_bcast_counter++;
  const std::string base = "broadcast_optimizer_state." + std::to_string(id);
  std::string bytes;
  if (rank() == root_rank) {
    ::torch::serialize::OutputArchive archive;
    optimizer.save(archive);
    size_t gi = 0;
    for (auto& group : optimizer.param_groups()) {
      ::torch::serialize::OutputArchive opts_archive;
      group.options().serialize(opts_archive);
      archive.write("hvd_group_options_" + std::to_string(gi++), opts_archive);
    }
    archive.save_to([&bytes](const void* data, size_t n) -> size_t {
      bytes.append(static_cast<const char*>(data), n);
      return n;
    });
  }
  std::vector<int64_t> len{static_cast<int64_t>(bytes.size())};
  const std::vector<Handle> hl{
      broadcast_async(base + ".size", TensorView(len.data(), DataType::kInt64, Shape{1}), root_rank)};
  ::hvd::detail::wait_all_or_park(hl, timeout, len);
  std::vector<unsigned char> buf(static_cast<size_t>(len[0]));
  if (rank() == root_rank) std::copy(bytes.begin(), bytes.end(), buf.begin());
  const std::vector<Handle> hb{
      broadcast_async(base + ".bytes", TensorView(buf.data(), DataType::kUInt8, Shape{len[0]}), root_rank)};
  ::hvd::detail::wait_all_or_park(hb, timeout, buf);
  if (rank() == root_rank) return;
  // The state goes where this rank's parameters are (the root's tensors may live on another
  // device, e.g. its own GPU): onto their device when they share one, else onto the CPU and
  // then, per parameter, onto that parameter's device.
  std::vector<at::Tensor> params;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) params.push_back(p);
  }
  bool one_device = true;
  for (const auto& p : params) one_device = one_device && p.device() == params.front().device();
  const at::Device target =
      !params.empty() && one_device ? params.front().device() : at::Device(at::kCPU);
  ::torch::serialize::InputArchive archive;
  archive.load_from(reinterpret_cast<const char*>(buf.data()), buf.size(), target);
  optimizer.state().clear();
  optimizer.load(archive);
  if (!one_device) move_state_to_parameters(optimizer, params);
  size_t gi = 0;
  for (auto& group : optimizer.param_groups()) {
    ::torch::serialize::InputArchive opts_archive;
    archive.read("hvd_group_options_" + std::to_string(gi++), opts_archive);
    group.options().serialize(opts_archive);
  }
}

}  // namespace torch
}  // namespace hvd
