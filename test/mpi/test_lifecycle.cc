// Copyright horovod_cpp authors. Lifecycle and topology under mpirun.
#include <mpi.h>

#include "horovod_cpp/mpi_interop.h"
#include "test_util.h"

using hvd::DataType;
using namespace hvdtest;

TEST_CASE("topology matches MPI (all ranks on this one host)", "[lifecycle]") {
  Session s;
  int wr = 0, ws = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &wr);
  MPI_Comm_size(MPI_COMM_WORLD, &ws);
  CHECK(hvd::rank() == wr);
  CHECK(hvd::size() == ws);
  CHECK(hvd::local_rank() == wr);
  CHECK(hvd::local_size() == ws);
  CHECK(hvd::cross_rank() == 0);
  CHECK(hvd::cross_size() == 1);
  CHECK(hvd::mpi_built());
}

TEST_CASE("init on a given communicator", "[lifecycle]") {
  int wr = 0, ws = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &wr);
  MPI_Comm_size(MPI_COMM_WORLD, &ws);
  // Even and odd world ranks form two independent jobs.
  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, wr % 2, wr, &sub);
  int sr = 0, ss = 0;
  MPI_Comm_rank(sub, &sr);
  MPI_Comm_size(sub, &ss);
  hvd::init(sub);
  CHECK(hvd::rank() == sr);
  CHECK(hvd::size() == ss);
  double v = wr;
  hvd::AllreduceOptions o;
  o.op = hvd::ReduceOp::kSum;
  wait_ok(hvd::allreduce_async("sub", hvd::TensorView(&v, DataType::kFloat64, {1}), o));
  double want = 0;
  for (int r = wr % 2; r < ws; r += 2) want += r;
  CHECK(v == want);
  hvd::shutdown();
  MPI_Comm_free(&sub);
}

TEST_CASE("bad configuration: settings that must agree across ranks", "[lifecycle][config]") {
  int wr = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &wr);
  {
    ScopedEnv env({{"HOROVOD_FUSION_THRESHOLD", wr == 0 ? "1024" : "2048"}});
    try {
      hvd::init();
      FAIL_CHECK("init accepted different fusion thresholds");
      hvd::shutdown();
    } catch (const hvd::InvalidArgumentError& e) {
      const std::string m = e.what();
      INFO(m);
      CHECK(m.find("HOROVOD_FUSION_THRESHOLD") != std::string::npos);
      CHECK(m.find("rank 0 has 1024") != std::string::npos);
    }
  }
  {
    ScopedEnv env({{"HOROVOD_CYCLE_TIME", "fast"}});
    CHECK_THROWS_WITH(hvd::init(), Catch::Contains("HOROVOD_CYCLE_TIME='fast'"));
  }
  CHECK_FALSE(hvd::is_initialized());
  Session s;  // and a good init works afterwards
  CHECK(hvd::is_initialized());
}
