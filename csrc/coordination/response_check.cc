// Copyright horovod_cpp authors.
#include "coordination/response_check.h"

#include <limits>
#include <string>

namespace hvd {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// a + b, or kMax when it does not fit (both are non-negative counts).
int64_t saturating_add(int64_t a, int64_t b) {
  int64_t s;
  return __builtin_add_overflow(a, b, &s) ? kMax : s;
}

std::string typed(DataType dtype, const Shape& shape) {
  return std::string(dtype_name(dtype)) + shape_str(shape);
}

bool uses_rows(OpType op) {
  return op == OpType::kAllgather || op == OpType::kAlltoall;
}

}  // namespace

AskedFor asked_for(const Request& q) {
  AskedFor a;
  a.op = q.op;
  a.dtype = q.dtype;
  a.device = q.device;
  a.digest = digest_of(q);
  return a;
}

namespace {

// What is wrong with the sizes `r` gives ("the response has ..."), or "".
std::string size_problem(const Response& r, int size) {
  const size_t n = static_cast<size_t>(size);
  for (int64_t d : r.shape) {
    if (d < 0) return "the response has a negative dimension";
  }
  if (num_elements(r.shape) == kMax) {
    return "the response's shape " + shape_str(r.shape) + " has too many elements";
  }
  if (!uses_rows(r.op)) return "";
  if (r.shape.empty()) return "the response has a scalar shape";
  if (r.first_dims.size() != n) {
    return "the response has " + std::to_string(r.first_dims.size()) + " first dimensions for " +
           std::to_string(n) + " ranks";
  }
  const int64_t row_bytes = saturating_mul(num_elements(Shape(r.shape.begin() + 1, r.shape.end())),
                                           static_cast<int64_t>(dtype_size(r.dtype)));
  int64_t rows = 0;
  for (int64_t d : r.first_dims) {
    if (d < 0) return "the response has a negative first dimension";
    rows = saturating_add(rows, d);
  }
  if (saturating_mul(rows, row_bytes) == kMax) {
    return "the response's first dimensions overflow the result's size";
  }
  if (r.op != OpType::kAlltoall) return "";
  if (r.all_splits.size() != n * n) {
    return "the response has " + std::to_string(r.all_splits.size()) + " splits for " +
           std::to_string(n) + " ranks";
  }
  // Row i: what rank i sends; column i: what it receives. Each sum, in bytes, must fit.
  for (size_t i = 0; i < n; ++i) {
    int64_t send = 0, recv = 0;
    for (size_t k = 0; k < n; ++k) {
      const int64_t out = r.all_splits[i * n + k], in = r.all_splits[k * n + i];
      if (out < 0 || in < 0) return "the response has a negative split";
      send = saturating_add(send, out);
      recv = saturating_add(recv, in);
    }
    if (saturating_mul(send, row_bytes) == kMax || saturating_mul(recv, row_bytes) == kMax) {
      return "the response's splits of rank " + std::to_string(i) + " overflow the sizes they give";
    }
  }
  return "";
}

}  // namespace

Status check_response_sizes(const Response& r, int size) {
  const std::string problem = size_problem(r, size);
  if (problem.empty()) return Status::OK();
  return Status::Mismatch(std::string(op_type_name(r.op)) + " '" + r.name + "': " + problem);
}

Status check_response_against_request(const Response& r, const AskedFor& mine, int rank, int size) {
  const std::string who = std::string(op_type_name(r.op)) + " '" + r.name + "': rank " +
                          std::to_string(rank) + " asked for ";
  auto differs = [&](const std::string& asked, const std::string& got) {
    return Status::Mismatch(who + asked + ", the response has " + got);
  };
  if (r.op != mine.op) return differs(op_type_name(mine.op), op_type_name(r.op));
  if (r.dtype != mine.dtype) return differs(dtype_name(mine.dtype), dtype_name(r.dtype));
  if (r.device != mine.device) return differs(mine.device.str(), r.device.str());
  if (rank < 0 || rank >= size) return Status::Mismatch(who + "a rank outside the set");
  if (std::string problem = size_problem(r, size); !problem.empty()) {
    return Status::Mismatch(std::string(op_type_name(r.op)) + " '" + r.name + "': for rank " +
                            std::to_string(rank) + ", " + problem);
  }
  const RequestDigest& d = mine.digest;
  if (uses_rows(r.op)) {
    // This rank's own first dimension and the others' trailing ones; the other ranks check
    // theirs, and every rank reads the same broadcast list.
    const int64_t own = r.first_dims[static_cast<size_t>(rank)];
    Shape expect = r.shape;
    expect[0] = own;
    if (d.dim0 != own || num_elements(expect) != d.numel ||
        shape_digest(expect.data(), expect.size()) != d.shape_hash) {
      return differs(d.dim0 < 0 ? std::string("a scalar")
                                : "a tensor of first dimension " + std::to_string(d.dim0),
                     "first dimension " + std::to_string(own) + " for it and " +
                         typed(r.dtype, r.shape) + " at rank 0");
    }
  } else if (r.op != OpType::kJoin && r.op != OpType::kBarrier &&
             (num_elements(r.shape) != d.numel || (r.shape.empty() ? -1 : r.shape[0]) != d.dim0 ||
              shape_digest(r.shape.data(), r.shape.size()) != d.shape_hash)) {
    return differs("another shape (" + std::to_string(d.numel) + " elements" +
                       (d.dim0 < 0 ? std::string(", a scalar)")
                                   : ", first dimension " + std::to_string(d.dim0) + ")"),
                   typed(r.dtype, r.shape));
  }
  const size_t n = static_cast<size_t>(size);
  const int64_t* row =
      r.op == OpType::kAlltoall ? &r.all_splits[static_cast<size_t>(rank) * n] : nullptr;
  // What this rank's input is read for, compared as it is (not by digest): at most its rows
  // (an alltoall may leave rows past the splits' sum unsent, as Horovod's does).
  int64_t sent = 0;
  for (size_t k = 0; row && k < n; ++k) sent = saturating_add(sent, row[k]);
  if ((row && sent > d.dim0) || params_digest(r.op, r.reduce_op, r.prescale, r.postscale, row,
                                               row ? n : 0) != d.params_hash) {
    if (r.op == OpType::kAlltoall) {
      std::string got;
      for (size_t k = 0; k < n; ++k) got += (k ? "," : "") + std::to_string(row[k]);
      return differs("other splits", "splits [" + got + "] for it");
    }
    if (r.reduce_op != d.reduce_op) {
      return differs(std::string("op ") + reduce_op_name(d.reduce_op),
                     std::string("op ") + reduce_op_name(r.reduce_op));
    }
    return differs("other scale factors", "prescale_factor " + std::to_string(r.prescale) +
                                              " and postscale_factor " +
                                              std::to_string(r.postscale));
  }
  if (r.op == OpType::kBroadcast && r.root != d.root) {
    return differs("root " + std::to_string(d.root), "root " + std::to_string(r.root));
  }
  return Status::OK();
}

}  // namespace hvd
