// A first horovod_cpp program: every rank contributes its rank, everyone gets the average.
//   mpirun -np 2 ./build/examples/hello_allreduce
#include <cstdio>
#include <vector>

#include "horovod_cpp/horovod_cpp.h"

int main() {
  hvd::init();
  std::vector<float> grad(4, static_cast<float>(hvd::rank()));
  hvd::allreduce("grad", hvd::TensorView(grad.data(), hvd::DataType::kFloat32, {4}));
  std::printf("rank %d/%d (local %d/%d): average of ranks = %.2f (expected %.2f)\n", hvd::rank(),
              hvd::size(), hvd::local_rank(), hvd::local_size(), grad[0],
              (hvd::size() - 1) / 2.0);
  const bool ok = grad[0] == (hvd::size() - 1) / 2.0f;
  hvd::shutdown();
  return ok ? 0 : 1;
}
