// Copyright horovod_cpp authors. The gradient engine's tensor operations on host float32
// Parameter buffers.
#include "training/host_ops.h"

namespace hvd {
namespace detail {
namespace {

// Every row of a parameter: a densified gradient handed back as a sparse one.
std::vector<int64_t> all_rows(const Parameter& p) {
  std::vector<int64_t> rows(static_cast<size_t>(p.rows()));
  for (int64_t r = 0; r < p.rows(); ++r) rows[static_cast<size_t>(r)] = r;
  return rows;
}

}  // namespace

void HostOps::dense_grad(ParameterPtr& p, HostBuffer& out) const {
  out.dtype = DataType::kFloat32;
  out.shape = p->shape();
  if (p->grad_kind() == GradKind::kSparse) {  // sparse_as_dense
    release(out);
    out.f32 = p->grad_as_dense();
    return;
  }
  out.borrowed = p->dense_grad().data();  // zeros if the parameter got no gradient
  out.owner = p;
}

void HostOps::sparse_rows(ParameterPtr& p, double scale, HostBuffer& indices, HostBuffer& values) const {
  indices.dtype = DataType::kInt64;
  indices.i64 = p->sparse_indices();
  indices.shape = Shape{static_cast<int64_t>(indices.i64.size())};
  values.dtype = DataType::kFloat32;
  values.f32 = p->sparse_values();
  values.shape = p->shape();
  values.shape[0] = static_cast<int64_t>(indices.i64.size());
  this->scale(values, scale);
}

void HostOps::scale(HostBuffer& b, double factor) const {
  if (factor == 1.0) return;
  float* d = b.floats();
  const size_t n = b.count();
  for (size_t j = 0; j < n; ++j) d[j] = static_cast<float>(d[j] * factor);
}

void HostOps::to_half(const HostBuffer& src, HostBuffer& out) const {
  out.dtype = DataType::kFloat16;
  out.shape = src.shape;
  const float* s = src.floats();
  const size_t n = src.count();
  out.f16.resize(n);
  for (size_t j = 0; j < n; ++j) out.f16[j] = float_to_half(s[j]);
}

void HostOps::from_half(const HostBuffer& half, HostBuffer& dst) const {
  float* d = dst.floats();
  const size_t n = dst.count();
  for (size_t j = 0; j < n; ++j) d[j] = half_to_float(half.f16[j]);
}

TensorView HostOps::view(const HostBuffer& b) const {
  switch (b.dtype) {
    case DataType::kFloat16: return TensorView(const_cast<uint16_t*>(b.f16.data()), b.dtype, b.shape);
    case DataType::kInt64: return TensorView(const_cast<int64_t*>(b.i64.data()), b.dtype, b.shape);
    default: return TensorView(const_cast<float*>(b.floats()), DataType::kFloat32, b.shape);
  }
}

void HostOps::put_dense_grad(ParameterPtr& p, HostBuffer& reduced) const {
  if (p->grad_kind() == GradKind::kSparse) {  // reduced densified: handed back as one row per row
    p->set_sparse_grad(all_rows(*p), std::move(reduced.f32));
    reduced.f32.clear();
  } else if (!reduced.borrowed) {  // a copy (semi-synchronous); else reduced in place
    p->dense_grad() = std::move(reduced.f32);
    reduced.f32.clear();
  }
}

void HostOps::put_sparse_grad(ParameterPtr& p, const hvd::Tensor& indices, const hvd::Tensor& values) const {
  const int64_t* i = indices.data_as<int64_t>();
  const float* v = values.data_as<float>();
  p->set_sparse_grad(std::vector<int64_t>(i, i + indices.numel()), std::vector<float>(v, v + values.numel()));
}

void HostOps::dense_grad_copy(const ParameterPtr& p, HostBuffer& out) const {
  release(out);
  out.dtype = DataType::kFloat32;
  out.shape = p->shape();
  out.f32 = p->grad_as_dense();  // zeros when this rank has no gradient for it
}

std::vector<std::pair<std::string, HostBuffer>> HostOps::averaged() const {
  std::vector<std::pair<std::string, HostBuffer>> out;
  auto borrow = [&out](std::string name, float* data, Shape shape, std::shared_ptr<void> owner) {
    HostBuffer b;
    b.shape = std::move(shape);
    b.borrowed = data;
    b.owner = std::move(owner);
    out.emplace_back(std::move(name), std::move(b));
  };
  for (const auto& p : params_) borrow("param." + p->name(), p->value().data(), p->shape(), p);
  if (average_state_) {
    for (auto& e : inner_->state()) {
      if (e.view.dtype == DataType::kFloat32) borrow("state." + e.name, static_cast<float*>(e.view.data), e.view.shape, inner_);
    }
  }
  return out;
}

void HostOps::clone(const HostBuffer& src, HostBuffer& out) const {
  release(out);
  out.dtype = DataType::kFloat32;
  out.shape = src.shape;
  out.f32.assign(src.floats(), src.floats() + src.count());
}

void HostOps::empty_like(const HostBuffer& src, HostBuffer& out) const {
  release(out);
  out.dtype = DataType::kFloat32;
  out.shape = src.shape;
  out.f32.resize(src.count());
}

void HostOps::fold(HostBuffer& target, const HostBuffer& mean, const HostBuffer& snapshot) const {
  float* d = target.floats();
  const float* m = mean.floats();
  const float* s = snapshot.floats();
  const size_t n = target.count();
  for (size_t j = 0; j < n; ++j) d[j] = m[j] + (d[j] - s[j]);
}

}  // namespace detail
}  // namespace hvd
