// Copyright horovod_cpp authors. Parameter, the Optimizer interface, reference SGD and Adam.
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "horovod_cpp/errors.h"
#include "horovod_cpp/training.h"

namespace hvd {

// ------------------------------------------------------------------------------------------
// Parameter

Parameter::Parameter(std::string name, Shape shape, std::vector<float> init, GradKind grad_kind)
    : name_(std::move(name)), shape_(std::move(shape)), grad_kind_(grad_kind) {
  if (name_.empty()) throw InvalidArgumentError("Parameter: the name must not be empty");
  if (shape_.empty()) {
    throw InvalidArgumentError("Parameter '" + name_ + "': needs at least one dimension");
  }
  for (int64_t d : shape_) {
    if (d < 0) throw InvalidArgumentError("Parameter '" + name_ + "': negative dimension in " + shape_str(shape_));
  }
  const int64_t n = num_elements(shape_);
  if (init.empty()) {
    value_.assign(static_cast<size_t>(n), 0.0f);
  } else if (static_cast<int64_t>(init.size()) != n) {
    throw InvalidArgumentError("Parameter '" + name_ + "': initial value has " +
                               std::to_string(init.size()) + " elements, shape " +
                               shape_str(shape_) + " needs " + std::to_string(n));
  } else {
    value_ = std::move(init);
  }
}

int64_t Parameter::row_size() const {
  int64_t r = 1;
  for (size_t i = 1; i < shape_.size(); ++i) r *= shape_[i];
  return r;
}

TensorView Parameter::value_view() {
  return TensorView(value_.data(), DataType::kFloat32, shape_);
}

std::vector<float>& Parameter::dense_grad() {
  if (grad_kind_ != GradKind::kDense) {
    throw InvalidArgumentError("Parameter '" + name_ + "': dense_grad() on a parameter with a sparse gradient");
  }
  if (dense_grad_.size() != value_.size()) dense_grad_.assign(value_.size(), 0.0f);
  has_grad_ = true;
  return dense_grad_;
}

void Parameter::add_dense_grad(const std::vector<float>& g) {
  if (g.size() != value_.size()) {
    throw InvalidArgumentError("Parameter '" + name_ + "': gradient has " + std::to_string(g.size()) +
                               " elements, expected " + std::to_string(value_.size()));
  }
  auto& d = dense_grad();
  for (size_t i = 0; i < g.size(); ++i) d[i] += g[i];
}

void Parameter::add_sparse_grad(const std::vector<int64_t>& indices, const std::vector<float>& values) {
  if (grad_kind_ != GradKind::kSparse) {
    throw InvalidArgumentError("Parameter '" + name_ + "': sparse gradient given to a parameter with a dense gradient");
  }
  const int64_t rs = row_size();
  if (static_cast<int64_t>(values.size()) != static_cast<int64_t>(indices.size()) * rs) {
    throw InvalidArgumentError("Parameter '" + name_ + "': " + std::to_string(indices.size()) +
                               " sparse rows need " + std::to_string(indices.size() * rs) +
                               " values, got " + std::to_string(values.size()));
  }
  for (int64_t r : indices) {
    if (r < 0 || r >= rows()) {
      throw InvalidArgumentError("Parameter '" + name_ + "': sparse row index " + std::to_string(r) +
                                 " out of range [0, " + std::to_string(rows()) + ")");
    }
  }
  sparse_indices_.insert(sparse_indices_.end(), indices.begin(), indices.end());
  sparse_values_.insert(sparse_values_.end(), values.begin(), values.end());
  has_grad_ = true;
}

void Parameter::set_sparse_grad(std::vector<int64_t> indices, std::vector<float> values) {
  sparse_indices_.clear();
  sparse_values_.clear();
  add_sparse_grad(indices, values);
}

std::vector<float> Parameter::grad_as_dense() const {
  std::vector<float> out(value_.size(), 0.0f);
  if (!has_grad_) return out;
  if (grad_kind_ == GradKind::kDense) {
    if (dense_grad_.size() == out.size()) out = dense_grad_;
    return out;
  }
  const int64_t rs = row_size();
  for (size_t k = 0; k < sparse_indices_.size(); ++k) {
    float* dst = out.data() + sparse_indices_[k] * rs;
    const float* src = sparse_values_.data() + static_cast<int64_t>(k) * rs;
    for (int64_t j = 0; j < rs; ++j) dst[j] += src[j];
  }
  return out;
}

void Parameter::zero_grad() {
  has_grad_ = false;
  std::fill(dense_grad_.begin(), dense_grad_.end(), 0.0f);
  sparse_indices_.clear();
  sparse_values_.clear();
}

ParameterPtr make_parameter(std::string name, Shape shape, std::vector<float> init, GradKind grad_kind) {
  return std::make_shared<Parameter>(std::move(name), std::move(shape), std::move(init), grad_kind);
}

// ------------------------------------------------------------------------------------------
// Optimizer

Optimizer::Optimizer(ParameterList params) : params_(std::move(params)) {
  for (const auto& p : params_) {
    if (!p) throw InvalidArgumentError("Optimizer: null parameter in the list");
  }
}

Optimizer::~Optimizer() = default;

void Optimizer::zero_grad() {
  for (auto& p : params_) p->zero_grad();
}

namespace {
TensorView float_view(std::vector<float>& v, const Shape& shape) {
  return TensorView(v.data(), DataType::kFloat32, shape);
}
TensorView scalar_view(double& d) { return TensorView(&d, DataType::kFloat64, Shape{1}); }
}  // namespace

// ------------------------------------------------------------------------------------------
// SGD

SGD::SGD(ParameterList params, SGDOptions options)
    : Optimizer(std::move(params)), opts_(options), lr_(options.lr) {
  if (opts_.nesterov && (opts_.momentum <= 0 || opts_.dampening != 0)) {
    throw InvalidArgumentError("SGD: Nesterov momentum requires a momentum and zero dampening");
  }
  momentum_.resize(params_.size());
  steps_.assign(params_.size(), 0.0);
  for (size_t i = 0; i < params_.size(); ++i) momentum_[i].assign(params_[i]->value().size(), 0.0f);
}

void SGD::step() {
  const float lr = static_cast<float>(lr_);
  const float mom = static_cast<float>(opts_.momentum);
  const float damp = static_cast<float>(opts_.dampening);
  const float wd = static_cast<float>(opts_.weight_decay);
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter& p = *params_[i];
    if (!p.has_grad()) continue;
    auto& w = p.value();
    if (p.grad_kind() == GradKind::kSparse && opts_.momentum == 0 && opts_.weight_decay == 0) {
      // Row-wise update: only the touched rows move.
      const int64_t rs = p.row_size();
      const auto& idx = p.sparse_indices();
      const auto& val = p.sparse_values();
      for (size_t k = 0; k < idx.size(); ++k) {
        float* dst = w.data() + idx[k] * rs;
        const float* g = val.data() + static_cast<int64_t>(k) * rs;
        for (int64_t j = 0; j < rs; ++j) dst[j] -= lr * g[j];
      }
      steps_[i] += 1;
      continue;
    }
    std::vector<float> g = p.grad_as_dense();
    if (wd != 0) {
      for (size_t j = 0; j < g.size(); ++j) g[j] += wd * w[j];
    }
    if (mom != 0) {
      auto& buf = momentum_[i];
      if (steps_[i] == 0) {
        buf = g;
      } else {
        for (size_t j = 0; j < g.size(); ++j) buf[j] = mom * buf[j] + (1 - damp) * g[j];
      }
      if (opts_.nesterov) {
        for (size_t j = 0; j < g.size(); ++j) g[j] += mom * buf[j];
      } else {
        g = buf;
      }
    }
    for (size_t j = 0; j < g.size(); ++j) w[j] -= lr * g[j];
    steps_[i] += 1;
  }
}

std::vector<StateEntry> SGD::state() {
  std::vector<StateEntry> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    out.push_back({params_[i]->name() + ".momentum_buffer", float_view(momentum_[i], params_[i]->shape())});
    out.push_back({params_[i]->name() + ".step", scalar_view(steps_[i])});
  }
  return out;
}

std::vector<std::pair<std::string, double*>> SGD::hyperparameters() {
  return {{"lr", &lr_},
          {"momentum", &opts_.momentum},
          {"dampening", &opts_.dampening},
          {"weight_decay", &opts_.weight_decay}};
}

// ------------------------------------------------------------------------------------------
// Adam

Adam::Adam(ParameterList params, AdamOptions options) : Optimizer(std::move(params)), opts_(options) {
  if (opts_.beta1 < 0 || opts_.beta1 >= 1 || opts_.beta2 < 0 || opts_.beta2 >= 1) {
    throw InvalidArgumentError("Adam: betas must lie in [0, 1)");
  }
  m_.resize(params_.size());
  v_.resize(params_.size());
  steps_.assign(params_.size(), 0.0);
  for (size_t i = 0; i < params_.size(); ++i) {
    m_[i].assign(params_[i]->value().size(), 0.0f);
    v_[i].assign(params_[i]->value().size(), 0.0f);
  }
}

void Adam::step() {
  const float b1 = static_cast<float>(opts_.beta1);
  const float b2 = static_cast<float>(opts_.beta2);
  const float eps = static_cast<float>(opts_.eps);
  const float wd = static_cast<float>(opts_.weight_decay);
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter& p = *params_[i];
    if (!p.has_grad()) continue;
    steps_[i] += 1;
    const double t = steps_[i];
    const double bias1 = 1.0 - std::pow(opts_.beta1, t);
    const double bias2 = 1.0 - std::pow(opts_.beta2, t);
    const float step_size = static_cast<float>(opts_.lr / bias1);
    const float sqrt_bias2 = static_cast<float>(std::sqrt(bias2));
    std::vector<float> g = p.grad_as_dense();
    auto& w = p.value();
    auto& m = m_[i];
    auto& v = v_[i];
    for (size_t j = 0; j < g.size(); ++j) {
      const float gj = wd != 0 ? g[j] + wd * w[j] : g[j];
      m[j] = b1 * m[j] + (1 - b1) * gj;
      v[j] = b2 * v[j] + (1 - b2) * gj * gj;
      const float denom = std::sqrt(v[j]) / sqrt_bias2 + eps;
      w[j] -= step_size * m[j] / denom;
    }
  }
}

std::vector<StateEntry> Adam::state() {
  std::vector<StateEntry> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    out.push_back({params_[i]->name() + ".exp_avg", float_view(m_[i], params_[i]->shape())});
    out.push_back({params_[i]->name() + ".exp_avg_sq", float_view(v_[i], params_[i]->shape())});
    out.push_back({params_[i]->name() + ".step", scalar_view(steps_[i])});
  }
  return out;
}

std::vector<std::pair<std::string, double*>> Adam::hyperparameters() {
  return {{"lr", &opts_.lr},
          {"beta1", &opts_.beta1},
          {"beta2", &opts_.beta2},
          {"eps", &opts_.eps},
          {"weight_decay", &opts_.weight_decay}};
}

}  // namespace hvd
