// Copyright horovod_cpp authors. Implementations of the small public helpers of types.h and
// tensor.h, and of op_type_name() (common/op_type.h).
#include <limits>
#include <sstream>

#include "common/buffer_cache.h"
#include "common/op_type.h"
#include "horovod_cpp/errors.h"
#include "horovod_cpp/tensor.h"
#include "horovod_cpp/types.h"

namespace hvd {

std::size_t dtype_size(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8:
    case DataType::kInt8:
    case DataType::kBool: return 1;
    case DataType::kInt16:
    case DataType::kUInt16:
    case DataType::kFloat16:
    case DataType::kBFloat16: return 2;
    case DataType::kInt32:
    case DataType::kFloat32: return 4;
    case DataType::kInt64:
    case DataType::kFloat64: return 8;
  }
  return 0;
}

const char* dtype_name(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8: return "uint8";
    case DataType::kInt8: return "int8";
    case DataType::kInt16: return "int16";
    case DataType::kUInt16: return "uint16";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
    case DataType::kFloat16: return "float16";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
    case DataType::kBool: return "bool";
  }
  return "unknown";
}

bool is_floating_point(DataType d) {
  return d == DataType::kFloat16 || d == DataType::kBFloat16 || d == DataType::kFloat32 ||
         d == DataType::kFloat64;
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAverage: return "average";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kProduct: return "product";
    case ReduceOp::kAdasum: return "adasum";
  }
  return "unknown";
}

std::string Device::str() const {
  if (is_cpu()) return "cpu";
  // Negotiation names CUDA tensors without an ordinal (each rank uses its own GPU).
  return index < 0 ? std::string("cuda") : "cuda:" + std::to_string(index);
}

int64_t saturating_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (!__builtin_mul_overflow(a, b, &r)) return r;
  return (a < 0) != (b < 0) ? std::numeric_limits<int64_t>::min()
                            : std::numeric_limits<int64_t>::max();
}

int64_t num_elements(const Shape& shape) {
  // A zero extent makes the product 0 whatever the others (checked first: a saturated
  // prefix must not hide it).
  for (int64_t d : shape) {
    if (d == 0) return 0;
  }
  int64_t n = 1;
  for (int64_t d : shape) n = saturating_mul(n, d);
  return n;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? "," : "") << shape[i];
  os << ']';
  return os.str();
}

int64_t TensorView::nbytes() const { return numel() * static_cast<int64_t>(dtype_size(dtype)); }

Tensor::Tensor(DataType dtype, Shape shape)
    : dtype_(dtype),
      shape_(std::move(shape)),
      storage_(std::make_shared<std::vector<unsigned char>>(
          static_cast<size_t>(num_elements(shape_)) * dtype_size(dtype))) {}

int64_t Tensor::nbytes() const { return numel() * static_cast<int64_t>(dtype_size(dtype_)); }

TensorView Tensor::view() { return TensorView(data(), dtype_, shape_, device_); }

Tensor Tensor::empty(DataType dtype, Shape shape) {
  const size_t bytes = static_cast<size_t>(num_elements(shape)) * dtype_size(dtype);
  // Large results reuse cached blocks (common/buffer_cache.h): no fresh pages to fault in.
  return adopt(dtype, std::move(shape), Device::cpu(), allocate_host_buffer(bytes));
}

Tensor Tensor::adopt(DataType dtype, Shape shape, Device device, std::shared_ptr<void> memory) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.external_ = std::move(memory);
  t.device_ = device;
  t.adopted_ = true;
  return t;
}

void throw_error(ErrorCode code, const std::string& what) {
  switch (code) {
    case ErrorCode::kNotInitialized: throw NotInitializedError(what);
    case ErrorCode::kInvalidArgument: throw InvalidArgumentError(what);
    case ErrorCode::kMismatch: throw MismatchError(what);
    case ErrorCode::kShutdown: throw ShutdownError(what);
    case ErrorCode::kTimeout: throw TimeoutError(what);
    case ErrorCode::kBackend: throw BackendError(what);
    case ErrorCode::kInternal: throw InternalError(what);
    case ErrorCode::kOk: break;
  }
  throw Error(code, what);
}

const char* op_type_name(OpType op) {
  switch (op) {
    case OpType::kAllreduce: return "allreduce";
    case OpType::kAllgather: return "allgather";
    case OpType::kBroadcast: return "broadcast";
    case OpType::kBarrier: return "barrier";
    case OpType::kAlltoall: return "alltoall";
    case OpType::kReducescatter: return "reducescatter";
    case OpType::kJoin: return "join";
  }
  return "unknown";
}

}  // namespace hvd
