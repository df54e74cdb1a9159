// Copyright horovod_cpp authors. The size sweep of hvd_bench --gpu: ours on CUDA tensors against
// raw NCCL on the same bytes (data, sizes and the driver: sweep.h). Raw NCCL: ncclAllReduce and
// ncclBroadcast in place, ncclAllGather, ncclAlltoAll (NCCL >= 2.28; grouped ncclSend/ncclRecv
// before), ncclReduceScatter, each followed by cudaStreamSynchronize. Results are copied to the
// host and checked element by element, ours and NCCL's alike.
#include <memory>
#include <string>
#include <vector>

#include "gpu_util.h"

namespace bench {
namespace {

/// Raw NCCL alltoall of `per` floats to every rank.
void nccl_alltoall(const Gpu& g, const float* in, float* out, int64_t per) {
  const size_t cnt = static_cast<size_t>(per);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
  BENCH_NCCL(ncclAlltoAll(in, out, cnt, ncclFloat32, g.nccl, g.stream));
#else
  BENCH_NCCL(ncclGroupStart());
  for (int p = 0; p < g.n; ++p) {
    BENCH_NCCL(ncclSend(in + p * per, cnt, ncclFloat32, p, g.nccl, g.stream));
    BENCH_NCCL(ncclRecv(out + p * per, cnt, ncclFloat32, p, g.nccl, g.stream));
  }
  BENCH_NCCL(ncclGroupEnd());
#endif
}

SweepCase make_nccl_case(const SweepLayout& l, const Gpu& g) {
  const std::string& op = l.op;
  const std::string name = "gpu.sweep." + op + "." + std::to_string(l.bytes);
  SweepCase c;
  c.layout = l;
  const int64_t in_n = l.in_n, out_n = l.out_n, per = l.per;
  const size_t n_in = static_cast<size_t>(in_n), n_per = static_cast<size_t>(per);
  const bool in_place = op == "allreduce" || op == "broadcast";
  DevBuf oin = device_alloc(in_n), rin = device_alloc(in_n);
  DevBuf rout = in_place ? rin : device_alloc(out_n);
  auto holder = std::make_shared<hvd::Tensor>();  // our last library-allocated result
  hvd::AllreduceOptions ar_sum;
  ar_sum.op = hvd::ReduceOp::kSum;
  hvd::ReducescatterOptions rs_sum;
  rs_sum.op = hvd::ReduceOp::kSum;

  if (op == "allreduce") {
    c.ours = [=] { hvd::allreduce_async(name, g.view(oin.get(), in_n), ar_sum).wait(); };
    c.base = [=] {
      BENCH_NCCL(ncclAllReduce(rin.get(), rin.get(), n_in, ncclFloat32, ncclSum, g.nccl, g.stream));
      g.sync();
    };
  } else if (op == "broadcast") {
    c.ours = [=] { hvd::broadcast_async(name, g.view(oin.get(), in_n), 0).wait(); };
    c.base = [=] {
      BENCH_NCCL(ncclBroadcast(rin.get(), rin.get(), n_in, ncclFloat32, 0, g.nccl, g.stream));
      g.sync();
    };
  } else if (op == "allgather") {
    c.ours = [=] { *holder = hvd::allgather_async(name, g.view(oin.get(), in_n)).result(); };
    c.base = [=] {
      BENCH_NCCL(ncclAllGather(rin.get(), rout.get(), n_per, ncclFloat32, g.nccl, g.stream));
      g.sync();
    };
  } else if (op == "alltoall") {
    c.ours = [=] { *holder = hvd::alltoall_async(name, g.view(oin.get(), in_n)).result(); };
    c.base = [=] {
      nccl_alltoall(g, rin.get(), rout.get(), per);
      g.sync();
    };
  } else {  // reducescatter
    c.ours = [=] {
      *holder = hvd::reducescatter_async(name, g.view(oin.get(), in_n), rs_sum).result();
    };
    c.base = [=] {
      BENCH_NCCL(ncclReduceScatter(rin.get(), rout.get(), n_per, ncclFloat32, ncclSum, g.nccl,
                                   g.stream));
      g.sync();
    };
  }

  c.check_ours = [=, ours = c.ours]() -> int64_t {
    l.fill(g.host_input(in_n));
    g.upload(oin.get(), in_n);
    ours();
    const void* result = oin.get();
    if (!in_place) {
      if (holder->numel() != out_n) return out_n;  // wrong shape: every element is wrong
      result = holder->data();
    }
    float* got = g.download(result, out_n);
    g.damage(got);
    return count_wrong(got, out_n, l.want);
  };
  c.check_base = [=, base = c.base] {
    l.fill(g.host_input(in_n));
    g.upload(rin.get(), in_n);
    base();
    return count_wrong(g.download(rout.get(), out_n), out_n, l.want);
  };
  return c;
}

}  // namespace

SweepBaseline nccl_baseline(const Gpu& gpu) {
  SweepBaseline b;
  b.label = "NCCL";
  b.key = "nccl";
  b.make_case = [gpu](const SweepLayout& l) { return make_nccl_case(l, gpu); };
  return b;
}

}  // namespace bench
