// Copyright horovod_cpp authors. The LibTorch adapter (horovod_cpp/torch.h).
#include "horovod_cpp/torch.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "semisync.h"

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

std::string sizes_str(const at::Tensor& t) {
  Shape s(t.sizes().begin(), t.sizes().end());
  return shape_str(s);
}

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
  }
  throw InvalidArgumentError("horovod_cpp: unknown dtype");
}

TensorView view(const at::Tensor& t) {
  if (!t.defined()) throw InvalidArgumentError("horovod_cpp: undefined tensor");
  if (t.is_sparse()) throw InvalidArgumentError("horovod_cpp: view() of a sparse tensor");
  // Built only for an error: view() runs once per tensor per step.
  auto what = [&t] { return "a tensor of shape " + sizes_str(t) + " on " + t.device().str(); };
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
    if (tensor.numel() == 0) return at::empty(sizes, opts);
    // No copy: the torch tensor shares the memory (from torch's caching allocator, see
    // install_torch_cuda_allocator) and keeps a copy of `tensor`, i.e. that memory, alive.
    Tensor keep = tensor;
    return at::from_blob(
        const_cast<void*>(tensor.data()), sizes, [keep](void*) mutable { keep = Tensor(); }, opts);
#else
    throw_no_cuda("to_torch()", "a result of shape " + shape_str(tensor.shape()) + " on " +
                                    tensor.device().str());
#endif
  }
  if (tensor.numel() == 0) return at::empty(sizes, opts);
  return at::from_blob(const_cast<void*>(tensor.data()), sizes, opts).clone();
}

// ------------------------------------------------------------------------------------------
// DistributedOptimizer

struct DistributedOptimizer::Impl {
  struct Slot {
    at::Tensor param;
    std::string name;     // the parameter's name
    std::string cname;    // collective name
    bool sparse_hint = false;
    int passes = 0;
    bool started = false;
    bool sparse_path = false;
    bool compressed = false;
    Handle h, hi, hv;
    at::Tensor send;  // what travels: the grad itself, its fp16 copy, or the scaled values
    at::Tensor idx;   // sparse indices, [nnz, sparse_dim]
    std::shared_ptr<::torch::autograd::Node> acc;
    uintptr_t hook_key = 0;
  };

  DistributedOptions opts;
  std::vector<Slot> slots;
  std::mutex mu;  // hooks may run on autograd threads
  bool synchronized = false;
  std::unique_ptr<detail::TorchSemiSync> semi;  // staleness / local SGD (semisync.cc)
  int64_t steps = 0;

  void mark_ready(size_t i) {
    std::lock_guard<std::mutex> lk(mu);
    Slot& s = slots[i];
    if (s.started || s.passes >= opts.backward_passes_per_step) {
      throw std::runtime_error("hvd::torch::DistributedOptimizer: the gradient of '" + s.name +
                               "' was computed more than backward_passes_per_step (" +
                               std::to_string(opts.backward_passes_per_step) +
                               ") times before step(); call step() and zero_grad() between steps, or "
                               "raise backward_passes_per_step (a parameter used twice in one graph is "
                               "reduced once, after its last use, only if each use goes through one "
                               "accumulation)");
    }
    synchronized = false;
    // Semi-synchronous modes communicate in step(), once the whole step's gradients exist.
    if (++s.passes == opts.backward_passes_per_step && !semi) start(s);
  }

  void start(Slot& s) {
    ::torch::NoGradGuard no_grad;
    at::Tensor& grad = s.param.mutable_grad();
    const bool sparse_grad = grad.defined() ? grad.is_sparse() : s.sparse_hint;
    if (!grad.defined()) {
      if (sparse_grad) {
        const int64_t sd = 1;
        // Indices on the parameter's device too: allgathered with the values.
        std::vector<int64_t> value_sizes{0};
        for (int64_t d = 1; d < s.param.dim(); ++d) value_sizes.push_back(s.param.size(d));
        grad = at::sparse_coo_tensor(at::empty({sd, 0}, s.param.options().dtype(at::kLong)),
                                     at::empty(value_sizes, s.param.options()), s.param.sizes());
      } else {
        grad = at::zeros_like(s.param);
      }
    }
    const double pass_scale =
        opts.average_aggregated_gradients ? 1.0 / static_cast<double>(opts.backward_passes_per_step) : 1.0;
    if (grad.is_sparse() && opts.sparse_as_dense) grad = grad.to_dense();
    if (grad.is_sparse()) {
      s.sparse_path = true;
      double scale = pass_scale;
      if (opts.op == ReduceOp::kAverage) scale /= static_cast<double>(size());
      s.idx = grad._indices().t().contiguous();
      s.send = (grad._values() * scale).contiguous();
      s.hi = allgather_async(s.cname + ".indices", view(s.idx));
      s.hv = allgather_async(s.cname + ".values", view(s.send));
      s.started = true;
      return;
    }
    s.sparse_path = false;
    if (!grad.is_contiguous()) grad = grad.contiguous();
    if (pass_scale != 1.0) grad.mul_(pass_scale);
    AllreduceOptions ao;
    ao.op = opts.op;
    if (opts.op == ReduceOp::kAverage) {
      ao.prescale_factor = 1.0 / opts.gradient_predivide_factor;
      ao.postscale_factor = opts.gradient_predivide_factor;
    }
    s.compressed = opts.compression == Compression::kFP16 && grad.is_floating_point() &&
                   grad.scalar_type() != at::kHalf;
    s.send = s.compressed ? grad.to(at::kHalf).contiguous() : grad;
    s.h = allreduce_async(s.cname, view(s.send), ao);
    s.started = true;
  }

  void finish(Slot& s) {
    ::torch::NoGradGuard no_grad;
    if (s.sparse_path) {
      s.hi.wait_up_to(opts.timeout);
      s.hv.wait_up_to(opts.timeout);
      at::Tensor idx = to_torch(s.hi.result()).t();
      at::Tensor val = to_torch(s.hv.result()).to(s.param.scalar_type());
      s.param.mutable_grad() = at::sparse_coo_tensor(idx, val, s.param.sizes());
    } else {
      s.h.wait_up_to(opts.timeout);
      if (s.compressed) s.param.mutable_grad().copy_(s.send);
    }
    s.started = false;
    s.passes = 0;
    s.send = at::Tensor();
    s.idx = at::Tensor();
    s.h = s.hi = s.hv = Handle();
  }

  void synchronize() {
    std::lock_guard<std::mutex> lk(mu);
    if (semi) {
      throw InvalidArgumentError("hvd::torch::DistributedOptimizer: synchronize() is not available with staleness "
                                 "or local SGD (step() does the communication); use flush() to complete it");
    }
    if (synchronized) return;
    // Frozen parameters (requires_grad false) are left alone, as the torch optimizers do.
    for (auto& s : slots) {
      if (!s.started && s.param.requires_grad()) start(s);
    }
    for (auto& s : slots) {
      if (s.started) finish(s);
    }
    synchronized = true;
  }

  void wait_all_quietly() {
    for (auto& s : slots) {
      for (const Handle* h : {&s.h, &s.hi, &s.hv}) {
        if (!h->valid()) continue;
        try {
          h->wait();
        } catch (...) {
        }
      }
    }
  }
};

namespace {

// Post-hook of a parameter's AccumulateGrad node: its .grad() is final for this pass.
class ReadyHook : public ::torch::autograd::FunctionPostHook {
 public:
  ReadyHook(std::weak_ptr<DistributedOptimizer::Impl> impl, size_t index) : impl_(std::move(impl)), index_(index) {}
  ::torch::autograd::variable_list operator()(const ::torch::autograd::variable_list& outputs,
                                              const ::torch::autograd::variable_list& /*inputs*/) override {
    if (auto impl = impl_.lock()) impl->mark_ready(index_);
    return outputs;
  }

 private:
  std::weak_ptr<DistributedOptimizer::Impl> impl_;
  size_t index_;
};

std::vector<std::pair<std::string, at::Tensor>> names_of_optimizer(
    ::torch::optim::Optimizer& optimizer, const std::vector<std::pair<std::string, at::Tensor>>& named) {
  std::unordered_map<const void*, std::string> by_impl;
  for (const auto& kv : named) by_impl.emplace(kv.second.unsafeGetTensorImpl(), kv.first);
  std::vector<std::pair<std::string, at::Tensor>> out;
  size_t g = 0;
  for (auto& group : optimizer.param_groups()) {
    size_t i = 0;
    for (auto& p : group.params()) {
      auto it = by_impl.find(p.unsafeGetTensorImpl());
      if (it == by_impl.end()) {
        throw InvalidArgumentError("hvd::torch::DistributedOptimizer: parameter " + std::to_string(i) +
                                   " of parameter group " + std::to_string(g) + " (shape " + sizes_str(p) +
                                   ") has no name: it is not among the named parameters given");
      }
      out.emplace_back(it->second, p);
      ++i;
    }
    ++g;
  }
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> pairs_of(const ::torch::OrderedDict<std::string, at::Tensor>& d) {
  std::vector<std::pair<std::string, at::Tensor>> v;
  for (const auto& item : d) v.emplace_back(item.key(), item.value());
  return v;
}

}  // namespace

DistributedOptimizer::DistributedOptimizer(::torch::optim::Optimizer& optimizer, const ::torch::nn::Module& module,
                                           DistributedOptions options)
    : optimizer_(optimizer), opts_(std::move(options)) {
  auto named = pairs_of(module.named_parameters(true));
  init(names_of_optimizer(optimizer_, named));
  // Parameters of sparse embeddings (the module itself may be one; it need not be held by a
  // shared_ptr, so it is not listed through named_modules()).
  auto is_sparse_embedding = [](const ::torch::nn::Module& m) {
    if (auto* e = dynamic_cast<const ::torch::nn::EmbeddingImpl*>(&m)) return e->options.sparse();
    if (auto* e = dynamic_cast<const ::torch::nn::EmbeddingBagImpl*>(&m)) return e->options.sparse();
    return false;
  };
  auto mark = [this](const std::string& name) {
    for (auto& s : impl_->slots) {
      if (s.name == name) s.sparse_hint = true;
    }
  };
  if (is_sparse_embedding(module)) mark("weight");
  for (const auto& item : module.named_modules("", /*include_self=*/false)) {
    if (is_sparse_embedding(*item.value())) mark(item.key() + ".weight");
  }
}

DistributedOptimizer::DistributedOptimizer(::torch::optim::Optimizer& optimizer,
                                           const ::torch::OrderedDict<std::string, at::Tensor>& named_parameters,
                                           DistributedOptions options)
    : optimizer_(optimizer), opts_(std::move(options)) {
  init(names_of_optimizer(optimizer_, pairs_of(named_parameters)));
}

DistributedOptimizer::DistributedOptimizer(::torch::optim::Optimizer& optimizer, DistributedOptions options)
    : optimizer_(optimizer), opts_(std::move(options)) {
  std::vector<std::pair<std::string, at::Tensor>> named;
  size_t g = 0;
  for (auto& group : optimizer_.param_groups()) {
    size_t i = 0;
    for (auto& p : group.params()) named.emplace_back("param_group." + std::to_string(g) + "." + std::to_string(i++), p);
    ++g;
  }
  init(named);
}

void DistributedOptimizer::init(const std::vector<std::pair<std::string, at::Tensor>>& named) {
  if (opts_.backward_passes_per_step < 1) {
    throw InvalidArgumentError("hvd::torch::DistributedOptimizer: backward_passes_per_step must be >= 1");
  }
  if (opts_.gradient_predivide_factor <= 0) {
    throw InvalidArgumentError("hvd::torch::DistributedOptimizer: gradient_predivide_factor must be > 0");
  }
  if (opts_.gradient_predivide_factor != 1.0 && opts_.op != ReduceOp::kAverage) {
    throw InvalidArgumentError("hvd::torch::DistributedOptimizer: gradient_predivide_factor needs op average");
  }
  std::vector<std::pair<std::string, std::string>> desc;
  for (const auto& kv : named) {
    desc.emplace_back(kv.first, "shape " + sizes_str(kv.second) + " " + c10::toString(kv.second.scalar_type()));
  }
  check_consistent_across_ranks(desc, "hvd::torch::DistributedOptimizer", "parameter", opts_.timeout);

  impl_ = std::make_shared<Impl>();
  impl_->opts = opts_;
  impl_->slots.resize(named.size());
  for (size_t i = 0; i < named.size(); ++i) {
    auto& s = impl_->slots[i];
    s.name = named[i].first;
    s.cname = opts_.name_prefix + "." + named[i].first;
    s.param = named[i].second;
  }
  for (size_t i = 0; i < named.size(); ++i) {
    auto& s = impl_->slots[i];
    if (!s.param.requires_grad()) continue;
    if (!s.param.is_leaf()) {
      throw InvalidArgumentError("hvd::torch::DistributedOptimizer: parameter '" + s.name + "' is not a leaf tensor");
    }
    s.acc = ::torch::autograd::impl::grad_accumulator(s.param);
    if (!s.acc) {
      throw InvalidArgumentError("hvd::torch::DistributedOptimizer: no gradient accumulator for '" + s.name + "'");
    }
    s.hook_key = s.acc->add_post_hook(std::make_unique<ReadyHook>(impl_, i));
  }
  if (opts_.staleness != 0 || opts_.local_sgd_period != 0 || opts_.local_sgd_warmup_steps < 0) {
    std::vector<std::pair<std::string, at::Tensor>> trainable;
    for (auto& s : impl_->slots) {
      if (s.param.requires_grad()) trainable.emplace_back(s.name, s.param);
    }
    impl_->semi = std::make_unique<detail::TorchSemiSync>(optimizer_, std::move(trainable), opts_);
  }
}

DistributedOptimizer::~DistributedOptimizer() {
  if (!impl_) return;
  for (auto& s : impl_->slots) {
    if (s.acc && s.hook_key) s.acc->del_post_hook(s.hook_key);
  }
  impl_->wait_all_quietly();
}

void DistributedOptimizer::synchronize() { impl_->synchronize(); }

void DistributedOptimizer::step() {
  if (impl_->semi) {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->semi->step(impl_->steps++);
    for (auto& s : impl_->slots) s.passes = 0;
    return;
  }
  impl_->synchronize();
  optimizer_.step();
  std::lock_guard<std::mutex> lk(impl_->mu);
  impl_->synchronized = false;
  ++impl_->steps;
}

void DistributedOptimizer::flush() {
  std::lock_guard<std::mutex> lk(impl_->mu);
  if (impl_->semi) impl_->semi->flush();
}

int64_t DistributedOptimizer::steps_taken() const { return impl_->steps; }

void DistributedOptimizer::zero_grad() {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    for (auto& s : impl_->slots) {
      if (s.started) {
        throw InvalidArgumentError("hvd::torch::DistributedOptimizer: zero_grad() while the reduction of '" + s.name +
                                   "' is in flight; call step() or synchronize() first");
      }
      s.passes = 0;
    }
    impl_->synchronized = false;
  }
  optimizer_.zero_grad();
}

size_t DistributedOptimizer::in_flight() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  size_t n = 0;
  for (const auto& s : impl_->slots) n += s.started ? 1 : 0;
  return n;
}

void DistributedOptimizer::set_sparse(const std::string& name) {
  for (auto& s : impl_->slots) {
    if (s.name == name) {
      s.sparse_hint = true;
      return;
    }
  }
  throw InvalidArgumentError("hvd::torch::DistributedOptimizer: no parameter named '" + name + "'");
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
    desc.emplace_back(item.key(), "shape " + sizes_str(item.value()) + " " + c10::toString(item.value().scalar_type()));
  }
  check_consistent_across_ranks(desc, "hvd::torch::broadcast_parameters", "tensor", timeout);
  ::torch::NoGradGuard no_grad;
  std::vector<Handle> hs;
  std::vector<std::pair<at::Tensor, at::Tensor>> copy_back;  // (target, contiguous buffer)
  for (const auto& item : named_tensors) {
    at::Tensor t = item.value();
    at::Tensor buf = t.is_contiguous() ? t : t.contiguous();
    if (!buf.is_same(t)) copy_back.emplace_back(t, buf);
    hs.push_back(broadcast_async("broadcast_parameters." + item.key(), view(buf), root_rank));
  }
  for (auto& h : hs) h.wait_up_to(timeout);
  for (auto& tb : copy_back) tb.first.copy_(tb.second);
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
                        "shape " + sizes_str(p) + " " + c10::toString(p.scalar_type()));
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
  Handle hl = broadcast_async(base + ".size", TensorView(len.data(), DataType::kInt64, Shape{1}), root_rank);
  hl.wait_up_to(timeout);
  std::vector<unsigned char> buf(static_cast<size_t>(len[0]));
  if (rank() == root_rank) std::copy(bytes.begin(), bytes.end(), buf.begin());
  Handle hb = broadcast_async(base + ".bytes", TensorView(buf.data(), DataType::kUInt8, Shape{len[0]}), root_rank);
  hb.wait_up_to(timeout);
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
