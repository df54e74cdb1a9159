// Copyright horovod_cpp authors.
#include "transport/row_layout.h"

#include <algorithm>

namespace hvd {

int64_t row_elements(const Shape& shape) {
  return shape.empty() ? 1 : num_elements(Shape(shape.begin() + 1, shape.end()));
}

AllgatherPlan plan_allgather(const Batch& b) {
  AllgatherPlan p;
  p.shape = b.shape;
  p.shape[0] = 0;
  for (int64_t d : b.first_dims) p.shape[0] += d;
  p.bytes = b.rank_bytes;
  return p;
}

int64_t alltoall_longest_block(const Batch& b) {
  const int64_t row_bytes =
      saturating_mul(row_elements(b.shape), static_cast<int64_t>(dtype_size(b.dtype)));
  int64_t rows = 0;
  for (int64_t k : b.all_splits) rows = std::max(rows, k);
  // Saturating: check_response_sizes() refused every response whose sizes overflow.
  return saturating_mul(rows, row_bytes);
}

AlltoallPlan plan_alltoall(const Batch& b, int size, int rank) {
  const size_t n = static_cast<size_t>(size);
  const size_t me = static_cast<size_t>(rank);
  const int64_t row_bytes =
      saturating_mul(row_elements(b.shape), static_cast<int64_t>(dtype_size(b.dtype)));
  AlltoallPlan p;
  p.send_bytes.resize(n);
  p.recv_bytes.resize(n);
  p.recv_rows.resize(n);
  p.recv_from.assign(n, 0);
  // all_splits is the size x size matrix of rows: row i, column k = what member i sends to k.
  for (size_t k = 0; k < n; ++k) {
    // Checked sums (check_response_sizes()): the products fit, and saturate rather than wrap.
    p.send_bytes[k] = saturating_mul(b.all_splits[me * n + k], row_bytes);
    p.recv_rows[k] = b.all_splits[k * n + me];
    p.recv_bytes[k] = saturating_mul(p.recv_rows[k], row_bytes);
    p.rows += p.recv_rows[k];
    for (size_t j = 0; j < me; ++j) {
      p.recv_from[k] += saturating_mul(b.all_splits[k * n + j], row_bytes);
    }
  }
  return p;
}

bool ReducescatterSplit::equal() const {
  return std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts[0]; });
}

ReducescatterSplit split_reducescatter(const Batch& b, int size) {
  const int64_t dim0 = b.shape.at(0);
  const int64_t row = row_elements(b.shape);
  ReducescatterSplit s;
  s.rows.resize(static_cast<size_t>(size));
  s.counts.resize(static_cast<size_t>(size));
  for (int k = 0; k < size; ++k) {
    s.rows[static_cast<size_t>(k)] = dim0 / size + (k < dim0 % size ? 1 : 0);
    s.counts[static_cast<size_t>(k)] = s.rows[static_cast<size_t>(k)] * row;
  }
  return s;
}

}  // namespace hvd
