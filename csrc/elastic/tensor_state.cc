// Copyright horovod_cpp authors. TensorState: parameters, optimizer state and integers.
#include <algorithm>
#include <cstring>

#include "horovod_cpp/elastic.h"
#include "horovod_cpp/errors.h"

namespace hvd {
namespace elastic {

TensorState::TensorState(ParameterList params, std::shared_ptr<Optimizer> optimizer,
                         std::map<std::string, int64_t> values)
    : params_(std::move(params)), optimizer_(std::move(optimizer)), values_(std::move(values)) {
  save();  // a failure before the first commit returns here
}

int64_t* TensorState::slot(const std::string& name) {
  auto it = values_.find(name);
  if (it == values_.end()) {
    throw InvalidArgumentError("hvd::elastic::TensorState has no value '" + name +
                               "' (name it in the constructor)");
  }
  return &it->second;
}

int64_t TensorState::value(const std::string& name) const {
  return *const_cast<TensorState*>(this)->slot(name);
}

void TensorState::set_value(const std::string& name, int64_t v) {
  *slot(name) = v;
}

void TensorState::save() {
  saved_params_.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) saved_params_[i] = params_[i]->value();
  saved_optimizer_.clear();
  saved_hyper_.clear();
  if (optimizer_) {
    for (const StateEntry& e : optimizer_->state()) {
      const auto* p = static_cast<const char*>(e.view.data);
      saved_optimizer_.emplace_back(p, p + e.view.nbytes());
    }
    for (const auto& kv : optimizer_->hyperparameters()) saved_hyper_.push_back(*kv.second);
  }
  saved_values_ = values_;
}

void TensorState::restore() {
  for (size_t i = 0; i < params_.size(); ++i) params_[i]->value() = saved_params_[i];
  if (optimizer_) {
    // The optimizer's entries are fixed at its construction (training.h), so they pair up.
    std::vector<StateEntry> st = optimizer_->state();
    for (size_t i = 0; i < st.size(); ++i) {
      std::memcpy(st[i].view.data, saved_optimizer_[i].data(), saved_optimizer_[i].size());
    }
    auto hp = optimizer_->hyperparameters();
    for (size_t i = 0; i < hp.size(); ++i) *hp[i].second = saved_hyper_[i];
  }
  values_ = saved_values_;
}

void TensorState::sync() {
  broadcast_parameters(params_, 0);
  if (optimizer_) broadcast_optimizer_state(*optimizer_, 0);
  if (!values_.empty()) {
    std::vector<int64_t> v;
    for (const auto& kv : values_) v.push_back(kv.second);
    broadcast("hvd.elastic.values",
              TensorView(v.data(), DataType::kInt64, Shape{static_cast<int64_t>(v.size())}), 0);
    size_t i = 0;
    for (auto& kv : values_) kv.second = v[i++];
  }
  save();
}

}  // namespace elastic
}  // namespace hvd
