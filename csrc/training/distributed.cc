// Copyright horovod_cpp authors. The cross-rank consistency check and the broadcasts of the
// training API. Every buffer a collective uses is owned here until the collective finishes: a
// timed-out wait parks it (training/in_flight.h) instead of freeing it under the collective.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>

#include "common/half.h"
#include "horovod_cpp/elastic.h"
#include "horovod_cpp/errors.h"
#include "horovod_cpp/training.h"
#include "training/in_flight.h"

namespace hvd {

// float16 conversion: the public names of common/half.h's conversions (the CPU kernels').

uint16_t float_to_half(float f) { return float_to_fp16(f); }
float half_to_float(uint16_t h) { return fp16_to_float(h); }

// ------------------------------------------------------------------------------------------
// Cross-rank consistency of a list of named entries.

namespace {

// Checks made in the current elastic generation (each check's collectives get a name of their
// own). Counted from 0 again in every generation: a worker that joins an elastic job later
// must name its checks as the workers that were there before it do.
std::mutex g_check_mu;
uint64_t g_check_counter = 0;     // guarded by g_check_mu
int64_t g_check_generation = -1;  // guarded by g_check_mu

std::string next_check_name() {
  const int64_t gen = elastic::generation();
  std::lock_guard<std::mutex> lk(g_check_mu);
  if (gen != g_check_generation) {
    g_check_generation = gen;
    g_check_counter = 0;
  }
  return "hvd.training.check.g" + std::to_string(gen) + "." + std::to_string(g_check_counter++);
}

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
  struct Sent {
    std::vector<unsigned char> bytes;
    std::vector<int64_t> size;  // every rank's byte count, to split the concatenation
  } sent{std::vector<unsigned char>(blob.begin(), blob.end()), {static_cast<int64_t>(blob.size())}};
  const std::string cname = next_check_name();
  const std::vector<Handle> hs{
      allgather_async(cname, TensorView(sent.bytes.empty() ? nullptr : sent.bytes.data(), DataType::kUInt8,
                                        Shape{static_cast<int64_t>(sent.bytes.size())})),
      allgather_async(cname + ".sizes", TensorView(sent.size.data(), DataType::kInt64, Shape{1}))};
  detail::wait_all_or_park(hs, timeout, sent);
  Tensor all = hs[0].result();
  Tensor sizes = hs[1].result();
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
  ParameterList keep = params;  // written in place: a timeout parks the parameters
  detail::wait_all_or_park(hs, timeout, keep);
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
  // The state is broadcast through copies owned here (the optimizer is only borrowed, so a
  // timed-out wait could not keep it alive) and copied back once every broadcast has finished.
  struct Copies {
    std::vector<std::vector<unsigned char>> state;
    std::vector<double> hyper;
  } copies;
  copies.state.reserve(st.size());
  std::vector<Handle> hs;
  for (auto& e : st) {
    const auto* src = static_cast<const unsigned char*>(e.view.data);
    copies.state.emplace_back(src, src + dtype_size(e.view.dtype) * static_cast<size_t>(e.view.numel()));
    TensorView v = e.view;
    v.data = copies.state.back().data();
    hs.push_back(broadcast_async("broadcast_optimizer_state." + e.name, v, root_rank));
  }
  for (const auto& kv : hp) copies.hyper.push_back(*kv.second);
  if (!copies.hyper.empty()) {
    hs.push_back(broadcast_async(
        "broadcast_optimizer_state.hyperparameters",
        TensorView(copies.hyper.data(), DataType::kFloat64, Shape{static_cast<int64_t>(copies.hyper.size())}),
        root_rank));
  }
  detail::wait_all_or_park(hs, timeout, copies);
  for (size_t i = 0; i < st.size(); ++i) {
    std::copy(copies.state[i].begin(), copies.state[i].end(), static_cast<unsigned char*>(st[i].view.data));
  }
  for (size_t i = 0; i < hp.size(); ++i) *hp[i].second = copies.hyper[i];
}

}  // namespace hvd
