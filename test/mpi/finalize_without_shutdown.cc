// Copyright horovod_cpp authors. A program that initialized MPI itself and calls MPI_Finalize
// without hvd::shutdown() first (as mpi4py does at interpreter exit): the library must shut
// down inside MPI_Finalize (common/exit_hook.h) and every rank exit with status 0, instead of
// its threads calling MPI after finalization (Open MPI then aborts the job).
//
//   finalize_without_shutdown world|split|pending
// world: a job on MPI_COMM_WORLD; split: even and odd world ranks run two jobs; pending: an
// allreduce is still in flight on the caller's side when MPI_Finalize comes (its handle must
// complete, with a result or an error, and never hang).
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "horovod_cpp/mpi_interop.h"

namespace {

int fail(int rank, const char* what) {
  std::fprintf(stderr, "rank %d: %s\n", rank, what);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int wr = 0, ws = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &wr);
  MPI_Comm_size(MPI_COMM_WORLD, &ws);
  const char* mode = argc > 1 ? argv[1] : "world";
  const bool split = std::strcmp(mode, "split") == 0;
  MPI_Comm job = MPI_COMM_WORLD;
  if (split) MPI_Comm_split(MPI_COMM_WORLD, wr % 2, wr, &job);
  hvd::init(job);

  // Every element of a 1 MiB sum, each rank's data seeded by its world rank.
  const int n = 1 << 18;
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(wr * 1000 + i % 97);
  hvd::AllreduceOptions o;
  o.op = hvd::ReduceOp::kSum;
  hvd::Handle h =
      hvd::allreduce_async("sum", hvd::TensorView(x.data(), hvd::DataType::kFloat32, {n}), o);
  h.wait();
  int members = 0, rank_sum = 0;
  for (int r = 0; r < ws; ++r) {
    if (!split || r % 2 == wr % 2) {
      ++members;
      rank_sum += r;
    }
  }
  for (int i = 0; i < n; ++i) {
    const float want = static_cast<float>(rank_sum * 1000 + members * (i % 97));
    if (x[i] != want) return fail(wr, "wrong allreduce result");
  }

  std::vector<float> y(16, 1.0f);
  hvd::Handle pending;
  const bool with_pending = std::strcmp(mode, "pending") == 0;
  if (with_pending) {
    pending = hvd::allreduce_async("pending",
                                   hvd::TensorView(y.data(), hvd::DataType::kFloat32, {16}), o);
  }
  // The program's own MPI traffic goes on beside the library's.
  int one = 1, total = 0;
  MPI_Allreduce(&one, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (total != ws) return fail(wr, "wrong MPI_Allreduce result");

  if (split) MPI_Comm_free(&job);
  MPI_Finalize();  // no hvd::shutdown() before it
  if (hvd::is_initialized()) return fail(wr, "still initialized after MPI_Finalize");
  if (with_pending) {
    // Either it completed before the shutdown (sum of ones) or it failed with ShutdownError.
    try {
      pending.wait();
      for (float v : y) {
        if (v != static_cast<float>(ws)) return fail(wr, "wrong result of the pending allreduce");
      }
    } catch (const hvd::ShutdownError&) {
    }
  }
  std::printf("rank %d: finalized without shutdown, exit 0\n", wr);
  return 0;
}
