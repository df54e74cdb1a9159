// Copyright horovod_cpp authors. The public API: argument checks, then the Runtime.
//
// The single process-wide pointer to the Runtime lives here, at the API boundary, guarded by
// a mutex; every call takes a shared reference so shutdown() cannot free it under a caller.
#include <cstdlib>
#include <mutex>

#include "common/logging.h"
#include "core/handle_state.h"
#include "core/runtime.h"
#include "horovod_cpp/api.h"
#include "horovod_cpp_build_config.h"

namespace hvd {
namespace {

std::mutex g_mu;
std::shared_ptr<Runtime> g_runtime;  // guarded by g_mu
bool g_atexit_registered = false;    // guarded by g_mu

std::shared_ptr<Runtime> runtime_or_throw(const char* what) {
  std::shared_ptr<Runtime> rt;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    rt = g_runtime;
  }
  if (!rt) {
    throw NotInitializedError(std::string("horovod_cpp: ") + what +
                              " called before hvd::init() or after hvd::shutdown()");
  }
  return rt;
}

std::string describe(const Request& q) {
  return std::string(op_type_name(q.op)) + " '" + q.name + "'";
}

void check_view(const Request& q, const TensorView& t, const char* role) {
  for (int64_t d : t.shape) {
    if (d < 0) throw InvalidArgumentError(describe(q) + ": " + role + " has a negative dimension " + shape_str(t.shape));
  }
  if (t.data == nullptr && t.numel() > 0) {
    throw InvalidArgumentError(describe(q) + ": " + role + " data pointer is null");
  }
  if (t.device.is_cuda() && !cuda_built()) {
    throw InvalidArgumentError(describe(q) + ": " + role + " is on " + t.device.str() +
                               " but this build of horovod_cpp has no CUDA support");
  }
  if (t.device.is_cuda()) {
    throw InvalidArgumentError(describe(q) + ": CUDA tensors are not supported by this "
                               "version's data plane yet");
  }
}

Request make_request(Runtime& rt, OpType op, const std::string& name, const TensorView& t) {
  Request q;
  q.rank = rt.mpi().rank();
  q.op = op;
  q.name = name.empty() ? rt.auto_name(op) : name;
  q.dtype = t.dtype;
  q.shape = t.shape;
  q.device = t.device;
  return q;
}

void check_allreduce(const Request& q, const AllreduceOptions& o) {
  if (q.dtype == DataType::kBool && q.reduce_op == ReduceOp::kAverage) {
    throw InvalidArgumentError(describe(q) + ": op average is not defined for bool tensors");
  }
  if (!is_floating_point(q.dtype) && (o.prescale_factor != 1.0 || o.postscale_factor != 1.0)) {
    throw InvalidArgumentError(describe(q) + ": prescale_factor/postscale_factor need a "
                               "floating-point tensor, not " + dtype_name(q.dtype));
  }
}

Handle submit(Runtime& rt, std::vector<TensorEntry> entries, const std::string& handle_name) {
  auto state = std::make_shared<detail::HandleState>(handle_name, static_cast<int>(entries.size()));
  for (auto& e : entries) e.handle = state;
  throw_if_error(rt.enqueue(std::move(entries)));
  return Handle(state);
}

void shutdown_at_exit() {
  try {
    shutdown();
  } catch (...) {
  }
}

}  // namespace

void init(const InitOptions& options) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_runtime) {
    if (g_runtime->running()) throw InvalidArgumentError("hvd::init(): already initialized");
    g_runtime.reset();  // stopped by another rank's shutdown or a stall: start afresh
  }
  std::unique_ptr<Runtime> rt;
  throw_if_error(Runtime::create(options, &rt));
  g_runtime = std::move(rt);
  if (!g_atexit_registered) {
    g_atexit_registered = true;
    std::atexit(shutdown_at_exit);
  }
}

void shutdown() {
  std::shared_ptr<Runtime> rt;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    rt.swap(g_runtime);
  }
  if (rt) rt->shutdown();
  // The last reference (possibly held by a caller still inside an API call) frees MPI
  // communicators when it goes.
}

bool is_initialized() {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_runtime && g_runtime->running();
}

int rank() { return runtime_or_throw("rank()")->mpi().rank(); }
int size() { return runtime_or_throw("size()")->mpi().size(); }
int local_rank() { return runtime_or_throw("local_rank()")->mpi().local_rank(); }
int local_size() { return runtime_or_throw("local_size()")->mpi().local_size(); }
int cross_rank() { return runtime_or_throw("cross_rank()")->mpi().cross_rank(); }
int cross_size() { return runtime_or_throw("cross_size()")->mpi().cross_size(); }

Handle allreduce_async(const std::string& name, TensorView input, TensorView output,
                       const AllreduceOptions& options) {
  auto rt = runtime_or_throw("allreduce");
  TensorEntry e;
  e.request = make_request(*rt, OpType::kAllreduce, name, input);
  e.request.reduce_op = options.op;
  e.request.prescale = options.prescale_factor;
  e.request.postscale = options.postscale_factor;
  check_view(e.request, input, "input");
  check_view(e.request, output, "output");
  if (output.dtype != input.dtype || output.shape != input.shape || output.device != input.device) {
    throw InvalidArgumentError(describe(e.request) + ": output " + dtype_name(output.dtype) +
                               shape_str(output.shape) + " does not match input " +
                               dtype_name(input.dtype) + shape_str(input.shape));
  }
  check_allreduce(e.request, options);
  e.input = input;
  e.output = output;
  const std::string hname = e.request.name;
  std::vector<TensorEntry> v;
  v.push_back(std::move(e));
  return submit(*rt, std::move(v), hname);
}

Handle allreduce_async(const std::string& name, TensorView tensor, const AllreduceOptions& options) {
  return allreduce_async(name, tensor, tensor, options);
}

void allreduce(const std::string& name, TensorView tensor, const AllreduceOptions& options) {
  allreduce_async(name, tensor, tensor, options).wait();
}

void allreduce(const std::string& name, TensorView input, TensorView output,
               const AllreduceOptions& options) {
  allreduce_async(name, input, output, options).wait();
}

Handle grouped_allreduce_async(const std::vector<std::string>& names,
                               const std::vector<TensorView>& tensors,
                               const AllreduceOptions& options) {
  auto rt = runtime_or_throw("grouped_allreduce");
  if (names.size() != tensors.size()) {
    throw InvalidArgumentError("grouped_allreduce: " + std::to_string(names.size()) +
                               " names for " + std::to_string(tensors.size()) + " tensors");
  }
  if (tensors.empty()) throw InvalidArgumentError("grouped_allreduce: empty group");
  std::vector<TensorEntry> entries;
  std::string key = "group";
  for (size_t i = 0; i < tensors.size(); ++i) {
    TensorEntry e;
    e.request = make_request(*rt, OpType::kAllreduce, names[i], tensors[i]);
    e.request.reduce_op = options.op;
    e.request.prescale = options.prescale_factor;
    e.request.postscale = options.postscale_factor;
    check_view(e.request, tensors[i], "tensor");
    check_allreduce(e.request, options);
    for (const auto& prev : entries) {
      if (prev.request.name == e.request.name) {
        throw InvalidArgumentError("grouped_allreduce: name '" + e.request.name +
                                   "' appears twice in the group");
      }
    }
    e.input = e.output = tensors[i];
    key += "|" + e.request.name;
    entries.push_back(std::move(e));
  }
  for (auto& e : entries) {
    e.request.group = key;
    e.request.group_size = static_cast<int32_t>(entries.size());
  }
  const std::string hname = "group of " + std::to_string(entries.size()) + " starting '" +
                            entries.front().request.name + "'";
  return submit(*rt, std::move(entries), hname);
}

void grouped_allreduce(const std::vector<std::string>& names, const std::vector<TensorView>& tensors,
                       const AllreduceOptions& options) {
  grouped_allreduce_async(names, tensors, options).wait();
}

Handle allgather_async(const std::string& name, TensorView input) {
  auto rt = runtime_or_throw("allgather");
  TensorEntry e;
  e.request = make_request(*rt, OpType::kAllgather, name, input);
  check_view(e.request, input, "input");
  if (input.shape.empty()) {
    throw InvalidArgumentError(describe(e.request) + ": cannot gather a scalar; give it shape [1]");
  }
  e.input = e.output = input;
  const std::string hname = e.request.name;
  std::vector<TensorEntry> v;
  v.push_back(std::move(e));
  return submit(*rt, std::move(v), hname);
}

Tensor allgather(const std::string& name, TensorView input) {
  return allgather_async(name, input).result();
}

Handle broadcast_async(const std::string& name, TensorView tensor, int root_rank) {
  auto rt = runtime_or_throw("broadcast");
  TensorEntry e;
  e.request = make_request(*rt, OpType::kBroadcast, name, tensor);
  e.request.root = root_rank;
  check_view(e.request, tensor, "tensor");
  if (root_rank < 0 || root_rank >= rt->mpi().size()) {
    throw InvalidArgumentError(describe(e.request) + ": root rank " + std::to_string(root_rank) +
                               " is not in [0, " + std::to_string(rt->mpi().size()) + ")");
  }
  e.input = e.output = tensor;
  const std::string hname = e.request.name;
  std::vector<TensorEntry> v;
  v.push_back(std::move(e));
  return submit(*rt, std::move(v), hname);
}

void broadcast(const std::string& name, TensorView tensor, int root_rank) {
  broadcast_async(name, tensor, root_rank).wait();
}

void barrier() {
  auto rt = runtime_or_throw("barrier");
  TensorEntry e;
  e.request.rank = rt->mpi().rank();
  e.request.op = OpType::kBarrier;
  e.request.name = "horovod_cpp.barrier";
  e.request.dtype = DataType::kUInt8;
  std::vector<TensorEntry> v;
  v.push_back(std::move(e));
  submit(*rt, std::move(v), "barrier").wait();
}

bool mpi_built() { return true; }
bool nccl_built() { return HOROVOD_CPP_HAVE_NCCL != 0; }
bool cuda_built() { return HOROVOD_CPP_HAVE_CUDA != 0; }

}  // namespace hvd
