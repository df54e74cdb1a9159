// Copyright horovod_cpp authors. Fault injection: one program, one fault per mode.
//
//   mpirun -np N hvd_fault MODE
// The victim is the last rank. Every other rank runs allreduces and must end within the
// bound (run_faults.sh measures it) with a non-zero status and a message naming the victim.
// MODE:
//   kill     the victim SIGKILLs itself while the others wait in an allreduce
//   throw    the victim throws; main reports it and returns 1 (hvd::shutdown runs at exit)
//   exit     the victim calls _exit(0): no shutdown, no MPI_Finalize
//   stall    the victim is stuck in its own code (sleeps for ever); run with
//            HOROVOD_STALL_CHECK_TIME_SECONDS=2 HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=5
//   local    the victim passes a null pointer: every rank must get an error naming it, and
//            the next collective must work (exits 0 when all that holds)
//   version  the victim claims another library version (HOROVOD_CPP_TEST_FAKE_VERSION set
//            by this program on the victim only): init fails on every rank, naming it
//   shm      plain allreduces (run with a shared-memory segment larger than /dev/shm): the
//            result must be right, through MPI (exits 0 when it is)
//   serialized  the program initializes MPI with MPI_THREAD_SERIALIZED itself: init must
//            refuse it on every rank (exits 0 when it does)
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "checked_allreduce.h"
#include "horovod_cpp/horovod_cpp.h"

namespace {

using hvd_fault::checked_allreduce;

// The bound is measured from this line (run_faults.sh): start-up time is not the library's.
void announce_fault(int rank) {
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::printf("rank %d: injecting fault at %.3f\n", rank, now);
  std::fflush(stdout);
}

int run(const std::string& mode, int world_rank, int world_size) {
  const int victim = world_size - 1;
  const bool is_victim = world_rank == victim;
  if (mode == "serialized") {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    try {
      hvd::init();
      std::fprintf(stderr, "rank %d: init accepted MPI thread level %d\n", world_rank, provided);
      return 2;
    } catch (const hvd::BackendError& e) {
      std::printf("rank %d: init refused: %s\n", world_rank, e.what());
    }
    MPI_Finalize();
    return 0;
  }
  if (mode == "version" && is_victim) setenv("HOROVOD_CPP_TEST_FAKE_VERSION", "99.0.0-fake", 1);
  hvd::init();
  for (int step = 0; step < 3; ++step) {
    if (!checked_allreduce("warmup." + std::to_string(step), 1000)) return 2;
  }
  if (mode == "shm") {
    for (int step = 0; step < 5; ++step) {
      if (!checked_allreduce("big." + std::to_string(step), 1 << 18)) return 2;
    }
    std::printf("rank %d: shm mode: results correct\n", world_rank);
    return 0;
  }
  if (mode == "local") {
    if (is_victim) announce_fault(world_rank);
    std::vector<float> v(16, 1.0f);
    std::string message;
    try {
      void* data = is_victim ? nullptr : v.data();
      hvd::allreduce("local.bad", hvd::TensorView(data, hvd::DataType::kFloat32, {16}));
      std::fprintf(stderr, "rank %d: 'local.bad' succeeded\n", world_rank);
      return 2;
    } catch (const hvd::Error& e) {
      message = e.what();
    }
    std::printf("rank %d: error: %s\n", world_rank, message.c_str());
    const std::string want = is_victim ? "null" : "rank " + std::to_string(victim) + ": ";
    if (message.find(want) == std::string::npos || message.find("local.bad") == std::string::npos) {
      std::fprintf(stderr, "rank %d: the error does not name rank %d and the reason\n", world_rank,
                   victim);
      return 2;
    }
    if (!checked_allreduce("local.after", 100)) return 2;
    std::printf("rank %d: local mode: error on every rank, next collective works\n", world_rank);
    return 0;
  }
  if (is_victim) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    announce_fault(world_rank);
    if (mode == "kill") raise(SIGKILL);
    if (mode == "throw") throw std::runtime_error("rank " + std::to_string(world_rank) + " failed");
    if (mode == "exit") _exit(0);
    if (mode == "stall") {
      while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
  // The others: the victim never submits this.
  checked_allreduce("never", 1 << 16);
  std::fprintf(stderr, "rank %d: 'never' completed\n", world_rank);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: hvd_fault kill|throw|exit|stall|local|version|shm|serialized\n");
    return 64;
  }
  // The rank before init (the version mode's init fails): Open MPI and MPICH set these.
  const char* r = std::getenv("OMPI_COMM_WORLD_RANK");
  const char* n = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (!r) r = std::getenv("PMI_RANK");
  if (!n) n = std::getenv("PMI_SIZE");
  const int world_rank = r ? std::atoi(r) : 0, world_size = n ? std::atoi(n) : 1;
  try {
    return run(argv[1], world_rank, world_size);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", world_rank, e.what());
    return 1;
  }
}
