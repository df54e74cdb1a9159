// Copyright horovod_cpp authors. CPU kernels of the TensorFlow ops (registered in ops.cc).
//
// Every kernel is an AsyncOpKernel: ComputeAsync hands the tensor to the runtime through the
// public C++ API (hvd::*_async) and returns; the completion thread (completion.h) finishes the
// op and calls `done` once the handle completes, so no TensorFlow thread waits on a collective.
// Inputs are kept alive by the continuation until the runtime is done with them.
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <horovod_cpp/horovod_cpp.h>

#include "attrs.h"
#include "completion.h"
#include "tensorflow/core/framework/allocation_description.pb.h"
#include "tensorflow/core/framework/allocator.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace hvd_tf {
namespace {

using tensorflow::AsyncOpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

// ---- conversions -------------------------------------------------------------------------
bool to_hvd_dtype(tensorflow::DataType t, hvd::DataType* out) {
  switch (t) {
    case tensorflow::DT_UINT8: *out = hvd::DataType::kUInt8; return true;
    case tensorflow::DT_INT8: *out = hvd::DataType::kInt8; return true;
    case tensorflow::DT_INT16: *out = hvd::DataType::kInt16; return true;
    // Only the ops that move bytes accept uint16 (ops.cc), as Horovod's.
    case tensorflow::DT_UINT16: *out = hvd::DataType::kUInt16; return true;
    case tensorflow::DT_INT32: *out = hvd::DataType::kInt32; return true;
    case tensorflow::DT_INT64: *out = hvd::DataType::kInt64; return true;
    case tensorflow::DT_HALF: *out = hvd::DataType::kFloat16; return true;
    case tensorflow::DT_BFLOAT16: *out = hvd::DataType::kBFloat16; return true;
    case tensorflow::DT_FLOAT: *out = hvd::DataType::kFloat32; return true;
    case tensorflow::DT_DOUBLE: *out = hvd::DataType::kFloat64; return true;
    case tensorflow::DT_BOOL: *out = hvd::DataType::kBool; return true;
    default: return false;
  }
}

// A view of a TensorFlow tensor's buffer (CPU memory; TF tensors are dense and row-major).
absl::Status view_of(const Tensor& t, hvd::TensorView* view) {
  hvd::DataType dt;
  if (!to_hvd_dtype(t.dtype(), &dt)) {
    return absl::InvalidArgumentError("horovod_cpp: unsupported dtype " +
                                      tensorflow::DataTypeString(t.dtype()));
  }
  hvd::Shape shape;
  shape.reserve(static_cast<size_t>(t.dims()));
  for (int i = 0; i < t.dims(); ++i) shape.push_back(t.dim_size(i));
  *view = hvd::TensorView(const_cast<char*>(t.tensor_data().data()), dt, std::move(shape));
  return absl::OkStatus();
}

// The TensorFlow status for a failed collective: the message names the tensor, ranks and what
// differs (the runtime wrote it); the code follows what went wrong.
absl::Status to_status(hvd::ErrorCode code, const std::string& message) {
  switch (code) {
    case hvd::ErrorCode::kOk: return absl::OkStatus();
    case hvd::ErrorCode::kInvalidArgument: return absl::InvalidArgumentError(message);
    case hvd::ErrorCode::kMismatch: return absl::FailedPreconditionError(message);
    case hvd::ErrorCode::kNotInitialized:
      return absl::FailedPreconditionError(message +
                                           " (call horovod_cpp.tensorflow.init() first)");
    case hvd::ErrorCode::kShutdown: return absl::AbortedError(message);
    case hvd::ErrorCode::kTimeout: return absl::DeadlineExceededError(message);
    case hvd::ErrorCode::kBackend: return absl::InternalError(message);
    case hvd::ErrorCode::kInternal: return absl::UnavailableError(message);  // a lost peer
  }
  return absl::UnknownError(message);
}

absl::Status status_of(const hvd::Handle& h) { return to_status(h.error_code(), h.error_message()); }

TensorShape tf_shape(const hvd::Shape& s) {
  TensorShape shape;
  for (int64_t d : s) shape.AddDim(d);
  return shape;
}

// A TensorFlow buffer over a result the library allocated: the output tensor shares its memory
// and keeps it alive. The copy it replaces doubled an eager 2-rank allgather of a 16 MiB
// result (4.9-5.7 ms against 2.4-2.6 ms shared). Not TensorFlow's memory: OwnsMemory() false
// keeps TensorFlow from handing it to another op as that op's output.
class ResultBuffer : public tensorflow::TensorBuffer {
 public:
  explicit ResultBuffer(const hvd::Tensor& result)
      : TensorBuffer(const_cast<void*>(result.data())), result_(result) {}
  size_t size() const override { return static_cast<size_t>(result_.nbytes()); }
  TensorBuffer* root_buffer() override { return this; }
  void FillAllocationDescription(tensorflow::AllocationDescription* proto) const override {
    proto->set_requested_bytes(static_cast<int64_t>(size()));
    proto->set_allocated_bytes(static_cast<int64_t>(size()));
    proto->set_allocator_name("horovod_cpp");
  }
  bool OwnsMemory() const override { return false; }

 private:
  const hvd::Tensor result_;
};

// Results from this size up become outputs without a copy where their memory is aligned as
// TensorFlow's allocators align theirs (Allocator::kAllocatorAlignment, 64 bytes in TF 2.21:
// Eigen's aligned loads rely on it); the library's large results are page aligned. Smaller
// ones are copied: cheaper than a buffer object.
constexpr int64_t kShareMinBytes = 64 * 1024;
constexpr uintptr_t kTfAlignment = tensorflow::Allocator::kAllocatorAlignment;

// Makes a library-allocated result output `index`: shared where it is large and aligned,
// otherwise copied into a new output of its shape.
absl::Status emit(OpKernelContext* ctx, int index, const hvd::Tensor& result) {
  if (result.nbytes() >= kShareMinBytes &&
      reinterpret_cast<uintptr_t>(result.data()) % kTfAlignment == 0) {
    ctx->set_output(index, Tensor(ctx->expected_output_dtype(index), tf_shape(result.shape()),
                                  tensorflow::core::RefCountPtr<tensorflow::TensorBuffer>(
                                      new ResultBuffer(result))));
    return absl::OkStatus();
  }
  Tensor* out = nullptr;
  TF_RETURN_IF_ERROR(ctx->allocate_output(index, tf_shape(result.shape()), &out));
  if (result.nbytes() > 0) {
    std::memcpy(const_cast<char*>(out->tensor_data().data()), result.data(),
                static_cast<size_t>(result.nbytes()));
  }
  return absl::OkStatus();
}

// Output `index` holding a copy of input `index` (reusing the input's buffer when TensorFlow
// allows it), for the collectives that work in place.
absl::Status in_place_output(OpKernelContext* ctx, int index, Tensor** out) {
  const Tensor& in = ctx->input(index);
  TF_RETURN_IF_ERROR(ctx->forward_input_or_allocate_output({index}, index, in.shape(), out));
  if ((*out)->tensor_data().data() != in.tensor_data().data() && in.TotalBytes() > 0) {
    std::memcpy(const_cast<char*>((*out)->tensor_data().data()), in.tensor_data().data(),
                in.TotalBytes());
  }
  return absl::OkStatus();
}

// ---- the common part of every collective kernel ------------------------------------------
class CollectiveKernel : public AsyncOpKernel {
 public:
  explicit CollectiveKernel(OpKernelConstruction* ctx) : AsyncOpKernel(ctx) {
    Naming naming;
    OP_REQUIRES_OK(ctx, read_naming(ctx, name(), &naming));
    name_ = std::move(naming.name);
    set_ = naming.set;
    // Eager ops (the only ones not named by their node) are run by the calling Python thread,
    // which waits for the result anyway: it waits on the handle itself, saving the hand-off to
    // the completion thread and back.
    inline_wait_ = !naming.from_node;
  }

 protected:
  // Submits through `submit` (which may throw hvd::Error for local misuse) and finishes the op
  // with `finish` once the handle completes successfully. `keep` holds the inputs alive.
  template <typename Submit, typename Finish>
  void run(OpKernelContext* ctx, DoneCallback done, std::vector<Tensor> keep, Submit submit,
           Finish finish) {
    hvd::Handle h;
    try {
      h = submit();
    } catch (const hvd::Error& e) {
      ctx->SetStatus(to_status(e.code(), e.what()));
      done();
      return;
    } catch (const std::exception& e) {
      ctx->SetStatus(absl::InternalError(std::string("horovod_cpp: ") + e.what()));
      done();
      return;
    }
    auto on_done = [ctx, done = std::move(done), keep = std::move(keep),
                    finish = std::move(finish)](const hvd::Handle& handle) {
      absl::Status s = status_of(handle);
      if (s.ok()) {
        try {
          s = finish(handle);
        } catch (const std::exception& e) {
          s = absl::InternalError(std::string("horovod_cpp: ") + e.what());
        }
      }
      if (!s.ok()) ctx->SetStatus(s);
      done();
    };
    if (inline_wait_) {
      try {
        h.wait();
      } catch (const std::exception&) {
        // Reported by on_done from the handle's status.
      }
      on_done(h);
      return;
    }
    when_done(std::move(h), std::move(on_done));
  }

  // Runs `submit(view of input 0)`, whose result (allocated by the library, of a shape known
  // only then) becomes output 0.
  template <typename Submit>
  void run_into_new_output(OpKernelContext* ctx, DoneCallback done, Submit submit) {
    const Tensor& in = ctx->input(0);
    hvd::TensorView vin;
    OP_REQUIRES_OK_ASYNC(ctx, view_of(in, &vin), done);
    run(ctx, std::move(done), {in}, [&] { return submit(vin); },
        [ctx](const hvd::Handle& h) { return emit(ctx, 0, h.result()); });
  }

  // Runs `submit(names, views of every input)`, a grouped collective whose results (allocated
  // by the library) become the outputs, one per input. Members are named name_.i.
  template <typename Submit>
  void run_grouped_into_new_outputs(OpKernelContext* ctx, DoneCallback done, Submit submit) {
    const int n = ctx->num_inputs();
    std::vector<hvd::TensorView> views(static_cast<size_t>(n));
    std::vector<std::string> names(static_cast<size_t>(n));
    std::vector<Tensor> keep;
    keep.reserve(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      keep.push_back(ctx->input(i));
      OP_REQUIRES_OK_ASYNC(ctx, view_of(ctx->input(i), &views[static_cast<size_t>(i)]), done);
      if (!name_.empty()) names[static_cast<size_t>(i)] = name_ + "." + std::to_string(i);
    }
    run(ctx, std::move(done), std::move(keep), [&] { return submit(names, views); },
        [ctx, n](const hvd::Handle& h) {
          const std::vector<hvd::Tensor> results = h.results();
          for (int i = 0; i < n; ++i) {
            TF_RETURN_IF_ERROR(emit(ctx, i, results[static_cast<size_t>(i)]));
          }
          return absl::OkStatus();
        });
  }

  static absl::Status ok(const hvd::Handle&) { return absl::OkStatus(); }

  std::string name_;
  hvd::ProcessSet set_;
  bool inline_wait_ = false;
};

// A collective that reduces: its options (of type Options) read once, at construction.
template <typename Options>
class ReducingKernel : public CollectiveKernel {
 public:
  explicit ReducingKernel(OpKernelConstruction* ctx) : CollectiveKernel(ctx) {
    Reduction r;
    OP_REQUIRES_OK(ctx, read_reduction(ctx, &r));
    options_ = r.options<Options>(set_);
  }

 protected:
  Options options_;
};

// ---- allreduce ---------------------------------------------------------------------------
class AllreduceKernel : public ReducingKernel<hvd::AllreduceOptions> {
 public:
  using ReducingKernel::ReducingKernel;

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& in = ctx->input(0);
    Tensor* out = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->forward_input_or_allocate_output({0}, 0, in.shape(), &out),
                         done);
    hvd::TensorView vin, vout;
    OP_REQUIRES_OK_ASYNC(ctx, view_of(in, &vin), done);
    OP_REQUIRES_OK_ASYNC(ctx, view_of(*out, &vout), done);
    const bool same = vin.data == vout.data;
    run(ctx, std::move(done), {in, *out}, [&] {
      return same ? hvd::allreduce_async(name_, vout, options_)
                  : hvd::allreduce_async(name_, vin, vout, options_);
    }, ok);
  }

};

class GroupedAllreduceKernel : public ReducingKernel<hvd::AllreduceOptions> {
 public:
  using ReducingKernel::ReducingKernel;

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const int n = ctx->num_inputs();
    std::vector<hvd::TensorView> views(static_cast<size_t>(n));
    std::vector<std::string> names(static_cast<size_t>(n));
    std::vector<Tensor> keep;
    keep.reserve(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      Tensor* out = nullptr;
      OP_REQUIRES_OK_ASYNC(ctx, in_place_output(ctx, i, &out), done);
      OP_REQUIRES_OK_ASYNC(ctx, view_of(*out, &views[static_cast<size_t>(i)]), done);
      keep.push_back(*out);
      if (!name_.empty()) names[static_cast<size_t>(i)] = name_ + "." + std::to_string(i);
    }
    run(ctx, std::move(done), std::move(keep),
        [&] { return hvd::grouped_allreduce_async(names, views, options_); }, ok);
  }

};

// ---- allgather, broadcast, alltoall, reducescatter ----------------------------------------
class AllgatherKernel : public CollectiveKernel {
 public:
  using CollectiveKernel::CollectiveKernel;
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    run_into_new_output(ctx, std::move(done), [this](const hvd::TensorView& v) {
      return hvd::allgather_async(name_, v, set_);
    });
  }
};

class GroupedAllgatherKernel : public CollectiveKernel {
 public:
  using CollectiveKernel::CollectiveKernel;
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    run_grouped_into_new_outputs(
        ctx, std::move(done),
        [this](const std::vector<std::string>& names, const std::vector<hvd::TensorView>& v) {
          return hvd::grouped_allgather_async(names, v, set_);
        });
  }
};

class BroadcastKernel : public CollectiveKernel {
 public:
  explicit BroadcastKernel(OpKernelConstruction* ctx) : CollectiveKernel(ctx) {
    int64_t root = 0;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("root_rank", &root));
    root_ = static_cast<int>(root);
  }
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    Tensor* out = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, in_place_output(ctx, 0, &out), done);
    hvd::TensorView v;
    OP_REQUIRES_OK_ASYNC(ctx, view_of(*out, &v), done);
    run(ctx, std::move(done), {*out}, [&] { return hvd::broadcast_async(name_, v, root_, set_); },
        ok);
  }

 private:
  int root_ = 0;
};

class AlltoallKernel : public CollectiveKernel {
 public:
  using CollectiveKernel::CollectiveKernel;
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& in = ctx->input(0);
    const Tensor& splits_in = ctx->input(1);
    OP_REQUIRES_ASYNC(ctx, splits_in.dims() <= 1,
                      absl::InvalidArgumentError("horovod_cpp alltoall '" + name_ +
                                                 "': splits must be a vector, got shape " +
                                                 splits_in.shape().DebugString()),
                      done);
    std::vector<int64_t> splits;
    for (int64_t i = 0; i < splits_in.NumElements(); ++i) {
      splits.push_back(splits_in.dtype() == tensorflow::DT_INT32 ? splits_in.flat<int32_t>()(i)
                                                                 : splits_in.flat<int64_t>()(i));
    }
    hvd::TensorView vin;
    OP_REQUIRES_OK_ASYNC(ctx, view_of(in, &vin), done);
    run(ctx, std::move(done), {in},
        [&] { return hvd::alltoall_async(name_, vin, splits, set_); },
        [ctx](const hvd::Handle& h) {
          TF_RETURN_IF_ERROR(emit(ctx, 0, h.result()));
          const std::vector<int64_t> received = h.received_splits();
          Tensor* rs = nullptr;
          TF_RETURN_IF_ERROR(ctx->allocate_output(
              1, TensorShape({static_cast<int64_t>(received.size())}), &rs));
          for (size_t i = 0; i < received.size(); ++i) {
            rs->flat<int32_t>()(static_cast<int64_t>(i)) = static_cast<int32_t>(received[i]);
          }
          return absl::OkStatus();
        });
  }
};

class ReducescatterKernel : public ReducingKernel<hvd::ReducescatterOptions> {
 public:
  using ReducingKernel::ReducingKernel;
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    run_into_new_output(ctx, std::move(done), [this](const hvd::TensorView& v) {
      return hvd::reducescatter_async(name_, v, options_);
    });
  }
};

class GroupedReducescatterKernel : public ReducingKernel<hvd::ReducescatterOptions> {
 public:
  using ReducingKernel::ReducingKernel;
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    run_grouped_into_new_outputs(
        ctx, std::move(done),
        [this](const std::vector<std::string>& names, const std::vector<hvd::TensorView>& v) {
          return hvd::grouped_reducescatter_async(names, v, options_);
        });
  }
};

// ---- join and barrier: blocking calls, run off the executor's threads ---------------------
class JoinKernel : public AsyncOpKernel {
 public:
  using AsyncOpKernel::AsyncOpKernel;
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    run_detached([ctx, done = std::move(done)] {
      try {
        const int last = hvd::join();
        Tensor* out = nullptr;
        absl::Status s = ctx->allocate_output(0, TensorShape({}), &out);
        if (s.ok()) out->scalar<int32_t>()() = last;
        if (!s.ok()) ctx->SetStatus(s);
      } catch (const hvd::Error& e) {
        ctx->SetStatus(to_status(e.code(), e.what()));
      }
      done();
    });
  }
};

class BarrierKernel : public AsyncOpKernel {
 public:
  explicit BarrierKernel(OpKernelConstruction* ctx) : AsyncOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, read_process_set(ctx, &set_));
  }
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    run_detached([ctx, set = set_, done = std::move(done)] {
      try {
        hvd::barrier(set);
      } catch (const hvd::Error& e) {
        ctx->SetStatus(to_status(e.code(), e.what()));
      }
      done();
    });
  }

 private:
  hvd::ProcessSet set_;
};

}  // namespace

#define HVD_TF_CPU_KERNEL(op, cls) \
  REGISTER_KERNEL_BUILDER(Name(op).Device(tensorflow::DEVICE_CPU), cls)

HVD_TF_CPU_KERNEL("HorovodCppAllreduce", AllreduceKernel);
HVD_TF_CPU_KERNEL("HorovodCppGroupedAllreduce", GroupedAllreduceKernel);
HVD_TF_CPU_KERNEL("HorovodCppAllgather", AllgatherKernel);
HVD_TF_CPU_KERNEL("HorovodCppGroupedAllgather", GroupedAllgatherKernel);
HVD_TF_CPU_KERNEL("HorovodCppBroadcast", BroadcastKernel);
HVD_TF_CPU_KERNEL("HorovodCppAlltoall", AlltoallKernel);
HVD_TF_CPU_KERNEL("HorovodCppReducescatter", ReducescatterKernel);
HVD_TF_CPU_KERNEL("HorovodCppGroupedReducescatter", GroupedReducescatterKernel);
HVD_TF_CPU_KERNEL("HorovodCppJoin", JoinKernel);
HVD_TF_CPU_KERNEL("HorovodCppBarrier", BarrierKernel);

}  // namespace hvd_tf
