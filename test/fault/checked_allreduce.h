// Copyright horovod_cpp authors. The fault programs' proof that collectives still work.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "horovod_cpp/horovod_cpp.h"

namespace hvd_fault {

/// Sums `n` floats (rank + i % 7) across ranks and checks every element; true when right
/// (a wrong element is printed, naming this rank).
inline bool checked_allreduce(const std::string& name, int n) {
  const int me = hvd::rank(), size = hvd::size();
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(me + i % 7);
  hvd::AllreduceOptions sum;
  sum.op = hvd::ReduceOp::kSum;
  hvd::allreduce(name, hvd::TensorView(v.data(), hvd::DataType::kFloat32, {n}), sum);
  for (int i = 0; i < n; ++i) {
    const float want = static_cast<float>(size * (size - 1) / 2 + size * (i % 7));
    if (v[static_cast<size_t>(i)] != want) {
      std::fprintf(stderr, "rank %d: '%s'[%d] = %g, expected %g\n", me, name.c_str(), i,
                   v[static_cast<size_t>(i)], want);
      return false;
    }
  }
  return true;
}

}  // namespace hvd_fault
