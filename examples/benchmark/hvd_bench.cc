// Copyright horovod_cpp authors. hvd_bench: nccl-tests style benchmark of horovod_cpp against
// raw MPI in the same run (size sweep with a correctness check, then the training-like
// workloads of docs/benchmarks.md).
//   mpirun -np 2 ./build/examples/benchmark/hvd_bench -b 8 -e 64M -f 2 --json out.json
//   mpirun -np 1 ./build/examples/benchmark/hvd_bench --gpu -b 4 -e 1G --json gpu.json
// (--gpu: CUDA tensors against raw NCCL, gpu_bench.cc; only in builds with CUDA and NCCL.)
// The program initializes MPI itself (MPI_THREAD_MULTIPLE) and hands MPI_COMM_WORLD to
// horovod_cpp, which duplicates it; the raw-MPI baselines and the timing barriers run on a
// separate duplicate, so the two never share a communicator.
#include <mpi.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <fstream>
#include <string>
#include <utility>

#include "bench_util.h"
#include "benchmarks.h"
#include "horovod_cpp/horovod_cpp.h"
#include "horovod_cpp/mpi_interop.h"

namespace {

std::string now_utc() {
  char buf[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

// --gloo: the Gloo contract's place variables from MPI's view of the job (the benchmark runs
// under mpirun so that raw MPI is the baseline in the same run), then HOROVOD_GLOO=1.
void gloo_places_from_mpi(MPI_Comm comm) {
  int rank = 0, size = 1, local = 0, local_size = 1, cross = 0, cross_size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  MPI_Comm node, column;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local);
  MPI_Comm_size(node, &local_size);
  MPI_Comm_split(comm, local, rank, &column);
  MPI_Comm_rank(column, &cross);
  MPI_Comm_size(column, &cross_size);
  MPI_Comm_free(&node);
  MPI_Comm_free(&column);
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  const std::pair<const char*, std::string> vars[] = {
      {"HOROVOD_GLOO", "1"},
      {"HOROVOD_RANK", std::to_string(rank)},
      {"HOROVOD_SIZE", std::to_string(size)},
      {"HOROVOD_LOCAL_RANK", std::to_string(local)},
      {"HOROVOD_LOCAL_SIZE", std::to_string(local_size)},
      {"HOROVOD_CROSS_RANK", std::to_string(cross)},
      {"HOROVOD_CROSS_SIZE", std::to_string(cross_size)},
      {"HOROVOD_HOSTNAME", host}};
  for (const auto& [name, value] : vars) setenv(name, value.c_str(), 1);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int exit_code = -1;
  const bench::Options opts = bench::parse_args(argc, argv, rank, &exit_code);
  if (exit_code >= 0) {
    MPI_Finalize();
    return exit_code;
  }
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  int device = -1;
  if (opts.gpu) {
    exit_code = bench::gpu_prepare(comm, &device);
    if (exit_code >= 0) {
      MPI_Comm_free(&comm);
      MPI_Finalize();
      return exit_code;
    }
  }
  int64_t wrong = 0;
  bench::Json meta = bench::Json::object();
  bench::Json sweep = bench::Json::array(), workloads = bench::Json::array(),
              targets = bench::Json::array();
  char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(mpi_version, &len);
  std::string mpi_line(mpi_version, static_cast<size_t>(len));
  mpi_line = mpi_line.substr(0, mpi_line.find_first_of(",\n"));
  if (opts.gloo) gloo_places_from_mpi(comm);
  try {
    if (opts.gloo) {
      hvd::init();
    } else {
      hvd::init(MPI_COMM_WORLD);
    }
    if (rank == 0) {
      std::printf("# hvd_bench: %d ranks | %s controller | %s | thread level %s | %s | %s\n",
                  size, opts.gloo ? "Gloo" : "MPI", mpi_line.c_str(), provided == MPI_THREAD_MULTIPLE ? "multiple" : "lower",
                  cpu_model().c_str(), now_utc().c_str());
      std::printf("# times: median over steps of the slowest rank per step; ours (hvd) and raw "
                  "%s interleaved step by step\n", opts.gpu ? "NCCL" : "MPI");
    }
    if (opts.gpu) {
      wrong += bench::run_gpu(opts, comm, device, &meta, &sweep, &workloads);
    } else {
      if (!opts.ops.empty()) wrong += bench::run_sweep(opts, comm, &sweep);
      if (!opts.workloads.empty()) wrong += bench::run_workloads(opts, comm, &workloads, &targets);
    }
    hvd::shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hvd_bench: rank %d: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  if (rank == 0) {
    std::printf("\n# %s: %lld wrong elements in total\n", wrong ? "FAILED" : "OK",
                static_cast<long long>(wrong));
    if (!opts.json_file.empty()) {
      bench::Json root = bench::Json::object();
      meta.set("mode", opts.gpu ? "gpu" : "cpu").set("baseline", opts.gpu ? "nccl" : "mpi");
      meta.set("controller", opts.gloo ? "gloo" : "mpi");
      meta.set("ranks", size).set("mpi_library", mpi_line).set("cpu", cpu_model());
      meta.set("date_utc", now_utc()).set("wrong_total", static_cast<double>(wrong));
      root.set("meta", std::move(meta)).set("sweep", std::move(sweep));
      root.set("workloads", std::move(workloads)).set("targets", std::move(targets));
      std::ofstream f(opts.json_file);
      f << root.dump() << "\n";
      if (!f) std::fprintf(stderr, "hvd_bench: cannot write %s\n", opts.json_file.c_str());
    }
  }
  MPI_Comm_free(&comm);
  MPI_Finalize();
  return wrong ? 1 : 0;
}
