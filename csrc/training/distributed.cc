// Copyright horovod_cpp authors. DistributedOptimizer and the cross-rank consistency check.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>

#include "common/half.h"
#include "horovod_cpp/errors.h"
#include "horovod_cpp/training.h"
#include "training/semisync.h"

namespace hvd {

// float16 conversion: the public names of common/half.h's conversions (the CPU kernels').

uint16_t float_to_half(float f) { return float_to_fp16(f); }
float half_to_float(uint16_t h) { return fp16_to_float(h); }

// ------------------------------------------------------------------------------------------
// Cross-rank consistency of a list of named entries.

namespace {

std::atomic<uint64_t> g_check_counter{0};

struct Described {
  std::string name;
  std::string detail;  // e.g. "shape [4,5], dense gradient"
};

void put_str(std::string& out, const std::string& s) {
  const uint32_t n = static_cast<uint32_t>(s.size());
  out.append(reinterpret_cast<const char*>(&n), 4);
  out.append(s);
}

bool get_str(const unsigned char*& p, const unsigned char* end, std::string& s) {
  if (end - p < 4) return false;
  uint32_t n;
  std::memcpy(&n, p, 4);
  p += 4;
  if (static_cast<uint64_t>(end - p) < n) return false;
  s.assign(reinterpret_cast<const char*>(p), n);
  p += n;
  return true;
}

}  // namespace

namespace {
// Allgathers every rank's list of (name, detail) and checks on every rank, from the same
// data, that no rank has duplicate names and that every rank's list equals rank 0's. Throws
// the same error on every rank.
void check_entries_consistent(const std::vector<Described>& local, const std::string& what,
                              const std::string& kind, std::chrono::milliseconds timeout) {
  std::string blob;
  for (const auto& d : local) {
    put_str(blob, d.name);
    put_str(blob, d.detail);
  }
  std::vector<unsigned char> bytes(blob.begin(), blob.end());
  const std::string cname = "hvd.training.check." + std::to_string(g_check_counter++);
  Handle h = allgather_async(
      cname, TensorView(bytes.empty() ? nullptr : bytes.data(), DataType::kUInt8,
                        Shape{static_cast<int64_t>(bytes.size())}));
  h.wait_up_to(timeout);
  Tensor all = h.result();
  // Every rank's byte count, to split the concatenation.
  std::vector<int64_t> mine{static_cast<int64_t>(bytes.size())};
  Handle hs = allgather_async(cname + ".sizes", TensorView(mine.data(), DataType::kInt64, Shape{1}));
  hs.wait_up_to(timeout);
  Tensor sizes = hs.result();
  const int n = size();
  std::vector<std::vector<Described>> per_rank(static_cast<size_t>(n));
  const unsigned char* p = all.data_as<unsigned char>();
  for (int r = 0; r < n; ++r) {
    const int64_t len = sizes.data_as<int64_t>()[r];
    const unsigned char* end = p + len;
    while (p < end) {
      Described d;
      if (!get_str(p, end, d.name) || !get_str(p, end, d.detail)) {
        throw BackendError(what + ": malformed " + kind + " list received from rank " + std::to_string(r));
      }
      per_rank[static_cast<size_t>(r)].push_back(std::move(d));
    }
    p = end;
  }
  // Duplicates, on any rank (reported identically on every rank).
  for (int r = 0; r < n; ++r) {
    std::set<std::string> seen;
    for (const auto& d : per_rank[static_cast<size_t>(r)]) {
      if (!seen.insert(d.name).second) {
        throw InvalidArgumentError(what + ": " + kind + " name '" + d.name + "' is used more than once on rank " +
                                   std::to_string(r) + "; names must be unique");
      }
    }
  }
  // Every rank against rank 0.
  std::map<std::string, std::string> ref;
  for (const auto& d : per_rank[0]) ref[d.name] = d.detail;
  for (int r = 1; r < n; ++r) {
    std::map<std::string, std::string> cur;
    for (const auto& d : per_rank[static_cast<size_t>(r)]) cur[d.name] = d.detail;
    for (const auto& kv : cur) {
      auto it = ref.find(kv.first);
      if (it == ref.end()) {
        throw MismatchError(what + ": " + kind + " '" + kv.first + "' exists on rank " + std::to_string(r) +
                            " but not on rank 0; " + kind + " names must be the same on every rank");
      }
      if (it->second != kv.second) {
        throw MismatchError(what + ": " + kind + " '" + kv.first + "' has " + it->second + " on rank 0 but " +
                            kv.second + " on rank " + std::to_string(r));
      }
    }
    for (const auto& kv : ref) {
      if (!cur.count(kv.first)) {
        throw MismatchError(what + ": " + kind + " '" + kv.first + "' exists on rank 0 but not on rank " +
                            std::to_string(r) + "; " + kind + " names must be the same on every rank");
      }
    }
  }
}
}  // namespace

void check_consistent_across_ranks(const std::vector<std::pair<std::string, std::string>>& entries,
                                   const std::string& what, const std::string& kind,
                                   std::chrono::milliseconds timeout) {
  std::vector<Described> local;
  for (const auto& e : entries) local.push_back({e.first, e.second});
  check_entries_consistent(local, what, kind, timeout);
}

void check_parameters_consistent(const ParameterList& params, const std::string& what) {
  std::vector<Described> local;
  for (const auto& p : params) {
    if (!p) throw InvalidArgumentError(what + ": null parameter in the list");
    local.push_back({p->name(), "shape " + shape_str(p->shape()) +
                                     (p->grad_kind() == GradKind::kSparse ? ", sparse gradient" : ", dense gradient")});
  }
  check_entries_consistent(local, what, "parameter", std::chrono::milliseconds(0));
}

// ------------------------------------------------------------------------------------------
// DistributedOptimizer

struct DistributedOptimizer::Slot {
  ParameterPtr param;
  std::string name;  // collective name
  int passes = 0;
  bool started = false;
  bool sparse_path = false;  // allgather of rows (else allreduce)
  Handle h_dense;            // allreduce
  Handle h_idx, h_val;       // allgathers
  std::vector<float> buf;    // dense gradient sent (sparse_as_dense or scaled copies)
  std::vector<uint16_t> half;
  std::vector<int64_t> idx;
  bool uses_buf = false;
};

DistributedOptimizer::DistributedOptimizer(std::shared_ptr<Optimizer> optimizer, DistributedOptions options)
    : Optimizer(optimizer ? optimizer->parameters() : ParameterList{}), inner_(std::move(optimizer)),
      opts_(std::move(options)) {
  if (!inner_) throw InvalidArgumentError("DistributedOptimizer: the wrapped optimizer is null");
  if (opts_.backward_passes_per_step < 1) {
    throw InvalidArgumentError("DistributedOptimizer: backward_passes_per_step must be >= 1");
  }
  if (opts_.gradient_predivide_factor <= 0) {
    throw InvalidArgumentError("DistributedOptimizer: gradient_predivide_factor must be > 0");
  }
  if (opts_.gradient_predivide_factor != 1.0 && opts_.op != ReduceOp::kAverage) {
    throw InvalidArgumentError("DistributedOptimizer: gradient_predivide_factor needs op average");
  }
  bool any_sparse = false;
  for (const auto& p : params_) any_sparse |= p->grad_kind() == GradKind::kSparse;
  if (any_sparse && !opts_.sparse_as_dense && opts_.op != ReduceOp::kAverage && opts_.op != ReduceOp::kSum) {
    throw InvalidArgumentError(std::string("DistributedOptimizer: sparse gradients support op average or sum, not ") +
                               reduce_op_name(opts_.op) + " (or set sparse_as_dense)");
  }
  check_parameters_consistent(params_, "DistributedOptimizer");
  for (const auto& p : params_) {
    auto s = std::make_unique<Slot>();
    s->param = p;
    s->name = opts_.name_prefix + "." + p->name();
    s->sparse_path = p->grad_kind() == GradKind::kSparse && !opts_.sparse_as_dense;
    slots_.push_back(std::move(s));
  }
  if (opts_.staleness != 0 || opts_.local_sgd_period != 0 || opts_.local_sgd_warmup_steps != 0) {
    semisync_ = std::make_unique<detail::SemiSyncEngine>(*inner_, params_, opts_);
    if (opts_.staleness == 0 && opts_.local_sgd_period == 0) semisync_.reset();  // warmup alone: synchronous
  }
}

DistributedOptimizer::~DistributedOptimizer() {
  // Collectives still in flight write into our buffers: wait for them (errors ignored).
  for (auto& s : slots_) {
    if (!s->started) continue;
    for (const Handle* h : {&s->h_dense, &s->h_idx, &s->h_val}) {
      if (!h->valid()) continue;
      try {
        h->wait();
      } catch (...) {
      }
    }
  }
}

size_t DistributedOptimizer::index_of(const std::string& name) const {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i]->param->name() == name) return i;
  }
  throw InvalidArgumentError("DistributedOptimizer: no parameter named '" + name + "'");
}

void DistributedOptimizer::mark_ready(Parameter& param) {
  size_t i = slots_.size();
  for (size_t k = 0; k < slots_.size(); ++k) {
    if (slots_[k]->param.get() == &param) {
      i = k;
      break;
    }
  }
  if (i == slots_.size()) {
    throw InvalidArgumentError("DistributedOptimizer: mark_ready() of parameter '" + param.name() +
                               "', which this optimizer does not hold");
  }
  Slot& s = *slots_[i];
  if (s.started || s.passes >= opts_.backward_passes_per_step) {
    throw InvalidArgumentError("DistributedOptimizer: gradient of '" + param.name() + "' marked ready more than " +
                               "backward_passes_per_step (" + std::to_string(opts_.backward_passes_per_step) +
                               ") times before step(); call step() (or synchronize()) and zero_grad() "
                               "between steps");
  }
  synchronized_ = false;
  // Semi-synchronous modes communicate in step(), after the whole step's gradients exist.
  if (++s.passes == opts_.backward_passes_per_step && !semisync_) start(i);
}

void DistributedOptimizer::mark_ready(const std::string& name) { mark_ready(*slots_[index_of(name)]->param); }

void DistributedOptimizer::start(size_t i) {
  Slot& s = *slots_[i];
  Parameter& p = *s.param;
  const double pass_scale =
      opts_.average_aggregated_gradients ? 1.0 / static_cast<double>(opts_.backward_passes_per_step) : 1.0;
  if (s.sparse_path) {
    double scale = pass_scale;
    if (opts_.op == ReduceOp::kAverage) scale /= static_cast<double>(size());
    s.idx = p.sparse_indices();
    s.buf = p.sparse_values();
    for (auto& v : s.buf) v = static_cast<float>(v * scale);
    Shape vshape = p.shape();
    vshape[0] = static_cast<int64_t>(s.idx.size());
    s.h_idx = allgather_async(s.name + ".indices",
                              TensorView(s.idx.data(), DataType::kInt64, Shape{static_cast<int64_t>(s.idx.size())}));
    s.h_val = allgather_async(s.name + ".values", TensorView(s.buf.data(), DataType::kFloat32, vshape));
    s.started = true;
    return;
  }
  AllreduceOptions ao;
  ao.op = opts_.op;
  if (opts_.op == ReduceOp::kAverage) {
    ao.prescale_factor = 1.0 / opts_.gradient_predivide_factor;
    ao.postscale_factor = opts_.gradient_predivide_factor;
  }
  float* data;
  if (p.grad_kind() == GradKind::kSparse) {  // sparse_as_dense
    s.buf = p.grad_as_dense();
    s.uses_buf = true;
    data = s.buf.data();
  } else {
    s.uses_buf = false;
    data = p.dense_grad().data();  // zeros if the parameter got no gradient
  }
  const int64_t n = p.numel();
  if (pass_scale != 1.0) {
    for (int64_t j = 0; j < n; ++j) data[j] = static_cast<float>(data[j] * pass_scale);
  }
  if (opts_.compression == Compression::kFP16) {
    s.half.resize(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) s.half[static_cast<size_t>(j)] = float_to_half(data[j]);
    s.h_dense = allreduce_async(s.name, TensorView(s.half.data(), DataType::kFloat16, p.shape()), ao);
  } else {
    s.h_dense = allreduce_async(s.name, TensorView(data, DataType::kFloat32, p.shape()), ao);
  }
  s.started = true;
}

void DistributedOptimizer::wait_handle(const Handle& h) { h.wait_up_to(opts_.timeout); }

void DistributedOptimizer::finish(size_t i) {
  Slot& s = *slots_[i];
  Parameter& p = *s.param;
  if (s.sparse_path) {
    wait_handle(s.h_idx);
    wait_handle(s.h_val);
    Tensor ti = s.h_idx.result();
    Tensor tv = s.h_val.result();
    std::vector<int64_t> idx(ti.data_as<int64_t>(), ti.data_as<int64_t>() + ti.numel());
    std::vector<float> val(tv.data_as<float>(), tv.data_as<float>() + tv.numel());
    p.set_sparse_grad(std::move(idx), std::move(val));
  } else {
    wait_handle(s.h_dense);
    std::vector<float>* target;
    if (s.uses_buf) {
      target = &s.buf;
    } else {
      target = &p.dense_grad();
    }
    if (opts_.compression == Compression::kFP16) {
      for (size_t j = 0; j < target->size(); ++j) (*target)[j] = half_to_float(s.half[j]);
    }
    if (s.uses_buf) {
      // A sparse parameter reduced as dense: hand it back as one row per row.
      std::vector<int64_t> all(static_cast<size_t>(p.rows()));
      for (int64_t r = 0; r < p.rows(); ++r) all[static_cast<size_t>(r)] = r;
      p.set_sparse_grad(std::move(all), std::move(s.buf));
      s.buf.clear();
    }
  }
  s.started = false;
  s.passes = 0;
  s.h_dense = Handle();
  s.h_idx = Handle();
  s.h_val = Handle();
}

void DistributedOptimizer::synchronize() {
  if (semisync_) {
    throw InvalidArgumentError("DistributedOptimizer: synchronize() is not available with staleness or local SGD "
                               "(step() does the communication); use flush() to complete it");
  }
  if (synchronized_) return;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i]->started) start(i);
  }
  for (size_t i = 0; i < slots_.size(); ++i) finish(i);
  synchronized_ = true;
}

void DistributedOptimizer::step() {
  if (semisync_) {
    semisync_->step(steps_taken_);
    for (auto& s : slots_) s->passes = 0;
  } else {
    synchronize();
    inner_->step();
  }
  ++steps_taken_;
  synchronized_ = false;
}

void DistributedOptimizer::flush() {
  if (semisync_) semisync_->flush();
}

void DistributedOptimizer::zero_grad() {
  for (auto& s : slots_) {
    if (s->started) {
      throw InvalidArgumentError("DistributedOptimizer: zero_grad() while the reduction of '" + s->param->name() +
                                 "' is in flight; call step() or synchronize() first");
    }
    s->passes = 0;
  }
  inner_->zero_grad();
  synchronized_ = false;
}

// ------------------------------------------------------------------------------------------
// Broadcasts

void broadcast_parameters(const ParameterList& params, int root_rank, std::chrono::milliseconds timeout) {
  std::vector<Described> local;
  for (const auto& p : params) {
    if (!p) throw InvalidArgumentError("broadcast_parameters: null parameter in the list");
    local.push_back({p->name(), "shape " + shape_str(p->shape())});
  }
  check_entries_consistent(local, "broadcast_parameters", "parameter", timeout);
  std::vector<Handle> hs;
  for (const auto& p : params) hs.push_back(broadcast_async("broadcast_parameters." + p->name(), p->value_view(), root_rank));
  for (auto& h : hs) h.wait_up_to(timeout);
}

void broadcast_optimizer_state(Optimizer& optimizer, int root_rank, std::chrono::milliseconds timeout) {
  std::vector<StateEntry> st = optimizer.state();
  auto hp = optimizer.hyperparameters();
  std::vector<Described> local;
  for (const auto& e : st) {
    local.push_back({e.name, std::string(dtype_name(e.view.dtype)) + " " + shape_str(e.view.shape)});
  }
  for (const auto& kv : hp) local.push_back({"hyperparameter:" + kv.first, "scalar"});
  check_entries_consistent(local, "broadcast_optimizer_state", "state entry", timeout);
  std::vector<Handle> hs;
  for (auto& e : st) hs.push_back(broadcast_async("broadcast_optimizer_state." + e.name, e.view, root_rank));
  std::vector<double> hv;
  for (const auto& kv : hp) hv.push_back(*kv.second);
  if (!hv.empty()) {
    hs.push_back(broadcast_async("broadcast_optimizer_state.hyperparameters",
                                 TensorView(hv.data(), DataType::kFloat64, Shape{static_cast<int64_t>(hv.size())}),
                                 root_rank));
  }
  for (auto& h : hs) h.wait_up_to(timeout);
  for (size_t i = 0; i < hp.size(); ++i) *hp[i].second = hv[i];
}

}  // namespace hvd
