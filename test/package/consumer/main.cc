// An outside program built against the installed horovod_cpp package.
#include <cstdio>

#include <horovod_cpp/horovod_cpp.h>

int main() {
  hvd::init();
  int v = hvd::rank() + 1;
  hvd::AllreduceOptions o;
  o.op = hvd::ReduceOp::kSum;
  hvd::allreduce("consumer.v", hvd::TensorView(&v, hvd::DataType::kInt32, {1}), o);
  const int n = hvd::size();
  const bool ok = v == n * (n + 1) / 2;
  std::printf("consumer rank %d: %d %s\n", hvd::rank(), v, ok ? "ok" : "WRONG");
  hvd::shutdown();
  return ok ? 0 : 1;
}
