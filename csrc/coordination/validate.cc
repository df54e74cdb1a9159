// Copyright horovod_cpp authors.
#include "coordination/validate.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <sstream>

namespace hvd {
namespace {

std::string fmt_double(double d) {
  std::ostringstream os;
  os << d;
  return os.str();
}

// How messages name rank r of the set: its global rank when `names` gives them.
int shown(const std::vector<int>& names, size_t r) {
  return r < names.size() ? names[r] : static_cast<int>(r);
}

// "rank 0 sent X, ranks 2,3 sent Y": ranks grouped by the value `describe` gives them, in
// order of first appearance. Empty when all ranks agree.
std::string disagreement(const std::vector<const Request*>& reqs, const std::vector<int>& names,
                         const std::function<std::string(const Request&)>& describe) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (size_t r = 0; r < reqs.size(); ++r) {
    if (!reqs[r]) continue;  // joined: sends zeros shaped like the others
    std::string v = describe(*reqs[r]);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == v; });
    if (it == groups.end()) {
      groups.push_back({v, {shown(names, r)}});
    } else {
      it->second.push_back(shown(names, r));
    }
  }
  if (groups.size() <= 1) return "";
  std::ostringstream os;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (g) os << ", ";
    const auto& ranks = groups[g].second;
    os << (ranks.size() == 1 ? "rank " : "ranks ");
    // Long lists are shortened: the first eight ranks, then a count.
    for (size_t i = 0; i < ranks.size() && i < 8; ++i) os << (i ? "," : "") << ranks[i];
    if (ranks.size() > 8) os << ",... (" << ranks.size() << " ranks)";
    os << " sent " << groups[g].first;
  }
  return os.str();
}

// The MPI data plane counts bytes (allgather, alltoall) or elements (reducescatter) in C ints.
// Checked here, where every rank's sizes are known, so the tensor fails on every rank instead
// of one rank returning early while the others enter the MPI call. CUDA tensors go through
// NCCL, whose counts are size_t: they get a bound of 2^48 (more than any device holds) so
// that sizes other ranks announce never reach NCCL, the allocator or the byte offsets derived
// from them near int64 overflow. Empty when within the limits.
std::string size_limit(const Response& resp, int n, const std::vector<int>& names) {
  const bool cpu = resp.device.is_cpu();
  const int64_t kMax = cpu ? 0x7fffffffLL : (1LL << 48);
  const std::string max_text = cpu ? "2^31-1" : "2^48";
  const std::string plane = cpu ? "the MPI data plane" : "a CUDA collective";
  const int64_t esize = static_cast<int64_t>(dtype_size(resp.dtype));
  const int64_t row =
      resp.shape.empty() ? 1 : num_elements(Shape(resp.shape.begin() + 1, resp.shape.end()));
  if (resp.op == OpType::kAllgather) {
    int64_t rows = 0;
    for (int64_t d : resp.first_dims) {
      if (__builtin_add_overflow(rows, d, &rows)) rows = std::numeric_limits<int64_t>::max();
    }
    const int64_t bytes = saturating_mul(saturating_mul(rows, row), esize);
    if (bytes > kMax) {
      return "the gathered result is " + std::to_string(bytes) + " bytes; " + plane +
             " moves at most " + max_text + " bytes per allgather";
    }
  } else if (resp.op == OpType::kAlltoall && resp.all_splits.size() == static_cast<size_t>(n) * n) {
    for (int r = 0; r < n; ++r) {
      int64_t send = 0, recv = 0;
      for (int k = 0; k < n; ++k) {
        if (__builtin_add_overflow(send, resp.all_splits[static_cast<size_t>(r * n + k)], &send)) {
          send = std::numeric_limits<int64_t>::max();
        }
        if (__builtin_add_overflow(recv, resp.all_splits[static_cast<size_t>(k * n + r)], &recv)) {
          recv = std::numeric_limits<int64_t>::max();
        }
      }
      const int64_t send_bytes = saturating_mul(saturating_mul(send, row), esize);
      const int64_t recv_bytes = saturating_mul(saturating_mul(recv, row), esize);
      if (std::max(send_bytes, recv_bytes) > kMax) {
        return "rank " + std::to_string(shown(names, static_cast<size_t>(r))) + " would send " +
               std::to_string(send_bytes) + " and receive " + std::to_string(recv_bytes) +
               " bytes; " + plane + " moves at most " + max_text + " bytes per rank per alltoall";
      }
    }
  } else if (resp.op == OpType::kReducescatter && num_elements(resp.shape) > kMax) {
    return std::to_string(num_elements(resp.shape)) + " elements; " + plane +
           " reduce-scatters at most " + max_text + " elements";
  }
  return "";
}

std::string typed_shape(const Request& q) {
  return std::string(dtype_name(q.dtype)) + shape_str(q.shape);
}

}  // namespace

Response build_response(const std::vector<const Request*>& reqs, const std::vector<int>& names) {
  std::vector<int> joined;
  const Request* first_ptr = nullptr;
  for (size_t r = 0; r < reqs.size(); ++r) {
    if (!reqs[r]) {
      joined.push_back(static_cast<int>(r));
    } else if (!first_ptr) {
      first_ptr = reqs[r];
    }
  }
  const Request& first = *first_ptr;
  Response resp;
  resp.op = first.op;
  resp.name = first.name;
  resp.dtype = first.dtype;
  resp.shape = first.shape;
  resp.device = first.device;
  resp.reduce_op = first.reduce_op;
  resp.prescale = first.prescale;
  resp.postscale = first.postscale;
  resp.root = first.root;
  resp.group = first.group;
  resp.group_size = first.group_size;

  // Ranks that could not submit the tensor (Request::error): it fails everywhere, naming them.
  {
    std::ostringstream failed;
    int nfailed = 0;
    for (size_t r = 0; r < reqs.size(); ++r) {
      if (!reqs[r] || reqs[r]->error.empty()) continue;
      if (nfailed < 8) {
        failed << (nfailed ? "; " : "") << "rank " << shown(names, r) << ": " << reqs[r]->error;
      }
      ++nfailed;
    }
    if (nfailed > 0) {
      if (nfailed > 8) failed << "; ... (" << nfailed << " ranks)";
      resp.error = std::string(op_type_name(first.op)) + " '" + first.name + "' failed on " +
                   (nfailed == 1 ? "a rank that" : std::to_string(nfailed) + " ranks that") +
                   " could not submit it: " + failed.str();
      return resp;
    }
  }
  // The common case, every rank asking for exactly the same thing, needs no formatting.
  bool identical = joined.empty() || first.op == OpType::kAllreduce;
  for (const Request* q : reqs) {
    if (!identical) break;
    if (!q) continue;
    identical = q->op == first.op && q->device == first.device && q->group == first.group &&
                q->group_size == first.group_size && q->dtype == first.dtype &&
                q->reduce_op == first.reduce_op && q->prescale == first.prescale &&
                q->postscale == first.postscale && q->root == first.root &&
                (first.op == OpType::kAllgather || first.op == OpType::kAlltoall
                     ? q->shape.size() == first.shape.size() && !q->shape.empty() &&
                           std::equal(q->shape.begin() + 1, q->shape.end(), first.shape.begin() + 1)
                     : q->shape == first.shape);
  }
  if (identical && first.op != OpType::kAllgather && first.op != OpType::kAlltoall) {
    if (auto limit = size_limit(resp, static_cast<int>(reqs.size()), names); !limit.empty()) {
      resp.error = std::string(op_type_name(first.op)) + " '" + first.name + "': " + limit;
    }
    return resp;
  }

  const std::string prefix = "'" + first.name + "': ";
  auto differ = [&](const std::function<std::string(const Request&)>& describe) {
    return disagreement(reqs, names, describe);
  };
  auto fail = [&](const std::string& what, const std::string& detail) {
    resp.error = what + " " + prefix + detail;
    return resp;
  };
  const std::string op = op_type_name(first.op);
  const int n = static_cast<int>(reqs.size());

  if (auto d = differ([](const Request& q) { return std::string(op_type_name(q.op)); });
      !d.empty()) {
    return fail("mismatched collective for", d);
  }
  if (!joined.empty() && first.op != OpType::kAllreduce) {
    std::string ranks;
    for (size_t i = 0; i < joined.size(); ++i) {
      ranks += (i ? "," : "") + std::to_string(shown(names, static_cast<size_t>(joined[i])));
    }
    return fail(op, std::string(joined.size() == 1 ? "rank " : "ranks ") + ranks +
                        " joined (hvd::join()) and cannot take part; while ranks have joined "
                        "only allreduce runs (the joined ranks contribute zeros)");
  }
  if (auto d = differ([](const Request& q) { return q.device.str() + " tensor"; }); !d.empty()) {
    return fail(op, d);
  }
  if (auto d = differ([](const Request& q) {
        return q.group.empty() ? std::string("it ungrouped")
                               : "it in a group of " + std::to_string(q.group_size);
      });
      !d.empty()) {
    return fail(op, d);
  }
  switch (first.op) {
    case OpType::kAllreduce:
    case OpType::kBroadcast:
    case OpType::kReducescatter:
      if (auto d = differ(typed_shape); !d.empty()) return fail(op, d);
      break;
    case OpType::kAlltoall:
    case OpType::kAllgather: {
      if (auto d = differ([](const Request& q) { return std::string(dtype_name(q.dtype)); });
          !d.empty()) {
        return fail(op, d);
      }
      // Every dimension but the first must agree.
      auto tail = [](const Request& q) {
        if (q.shape.empty()) return std::string("a scalar");
        Shape t(q.shape.begin() + 1, q.shape.end());
        return std::to_string(q.shape.size()) + "-d with trailing dims " + shape_str(t);
      };
      if (auto d = differ(tail); !d.empty()) return fail(op, d);
      if (first.shape.empty()) return fail(op, "cannot exchange scalars");
      for (const auto* q : reqs) resp.first_dims.push_back(q->shape[0]);
      if (first.op == OpType::kAlltoall) {
        for (const auto* q : reqs) {
          resp.all_splits.insert(resp.all_splits.end(), q->splits.begin(), q->splits.end());
        }
        if (resp.all_splits.size() != static_cast<size_t>(n) * static_cast<size_t>(n)) {
          return fail(op, "every rank must send " + std::to_string(n) + " splits");
        }
      }
      break;
    }
    case OpType::kBarrier:
    case OpType::kJoin:
      break;
  }
  if (auto limit = size_limit(resp, n, names); !limit.empty()) return fail(op, limit);
  if (first.op == OpType::kAllreduce || first.op == OpType::kReducescatter) {
    if (auto d = differ(
            [](const Request& q) { return std::string("op ") + reduce_op_name(q.reduce_op); });
        !d.empty()) {
      return fail(op, d);
    }
    if (auto d = differ([](const Request& q) {
          return "prescale_factor " + fmt_double(q.prescale) + " and postscale_factor " +
                 fmt_double(q.postscale);
        });
        !d.empty()) {
      return fail(op, d);
    }
  }
  if (first.op == OpType::kBroadcast) {
    if (auto d = differ([](const Request& q) { return "root " + std::to_string(q.root); });
        !d.empty()) {
      return fail(op, d);
    }
    // The root is a global rank; membership in the set was checked where it was submitted.
  }
  return resp;
}

}  // namespace hvd
