// Copyright horovod_cpp authors. Library-allocated CUDA results handed to Python without a copy,
// through the DLPack exchange format (the "dltensor" capsule that torch.utils.dlpack.from_dlpack
// and other frameworks accept).
//
// The structures below are the DLPack ABI (version 0.x, the unversioned DLManagedTensor that
// every framework reads), declared here so that no DLPack header is needed.
#include <cstdint>
#include <vector>

#include "bindings.h"

namespace hvdpy {
namespace {

struct DLDevice {
  int32_t device_type;  // kDLCPU = 1, kDLCUDA = 2
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;  // kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLBool = 6
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // null: compact row-major
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

constexpr int32_t kDLCPU = 1;
constexpr int32_t kDLCUDA = 2;

/// What a capsule owns: the result tensor (sharing its storage) and the shape array.
struct Owner {
  hvd::Tensor tensor;
  std::vector<int64_t> shape;
  DLManagedTensor managed{};
};

void delete_owner(DLManagedTensor* self) { delete static_cast<Owner*>(self->manager_ctx); }

DLDataType dl_dtype(hvd::DataType dt) {
  const uint8_t bits = static_cast<uint8_t>(hvd::dtype_size(dt) * 8);
  switch (dt) {
    case hvd::DataType::kUInt8:
    case hvd::DataType::kUInt16: return {1, bits, 1};
    case hvd::DataType::kInt8:
    case hvd::DataType::kInt16:
    case hvd::DataType::kInt32:
    case hvd::DataType::kInt64: return {0, bits, 1};
    case hvd::DataType::kFloat16:
    case hvd::DataType::kFloat32:
    case hvd::DataType::kFloat64: return {2, bits, 1};
    case hvd::DataType::kBFloat16: return {4, 16, 1};
    case hvd::DataType::kBool: return {6, 8, 1};
  }
  return {1, 8, 1};
}

// The capsule's destructor: a capsule that no framework consumed (still named "dltensor";
// a consumer renames it "used_dltensor" and takes over the deleter) frees its tensor.
void capsule_destructor(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (m != nullptr && m->deleter != nullptr) m->deleter(m);
}

py::object dlpack_capsule(const hvd::Tensor& t) {
  auto* owner = new Owner();
  owner->tensor = t;
  owner->shape.assign(t.shape().begin(), t.shape().end());
  DLManagedTensor& m = owner->managed;
  m.dl_tensor.data = owner->tensor.data();
  m.dl_tensor.device = {t.device().is_cuda() ? kDLCUDA : kDLCPU,
                        t.device().is_cuda() ? t.device().index : 0};
  m.dl_tensor.ndim = static_cast<int32_t>(owner->shape.size());
  m.dl_tensor.dtype = dl_dtype(t.dtype());
  m.dl_tensor.shape = owner->shape.empty() ? nullptr : owner->shape.data();
  m.dl_tensor.strides = nullptr;
  m.dl_tensor.byte_offset = 0;
  m.manager_ctx = owner;
  m.deleter = &delete_owner;
  PyObject* cap = PyCapsule_New(&m, "dltensor", &capsule_destructor);
  if (cap == nullptr) {
    delete owner;
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(cap);
}

}  // namespace

py::object to_python(const hvd::Tensor& t) {
  if (!t.device().is_cuda()) return to_numpy(t);
  py::list shape;
  for (int64_t d : t.shape()) shape.append(d);
  // An empty result may have no memory at all: Python makes the empty tensor itself.
  py::object cap = t.numel() > 0 ? dlpack_capsule(t) : py::none();
  return py::make_tuple(cap, shape, t.device().index);
}

}  // namespace hvdpy
