// Copyright horovod_cpp authors. Settings init() must refuse on every rank.
//
//   mpirun -np N-1 hvd_config_agreement VAR SHOWN SHOWN0 : \
//          -np 1 env VAR=VALUE hvd_config_agreement VAR SHOWN SHOWN0
// The last rank alone runs with VAR=VALUE (the MPMD form gives it its own environment). Every
// rank's init() must fail with a message naming VAR, rank 0's value as shown (SHOWN0) and the
// last rank's (SHOWN); then the program exits 0 on that rank. (`timeline-link`: see below.) Any
// other outcome (init succeeds, another error, a message that does not name them) exits 2. ctest's
// timeout turns a hang into a failure.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "horovod_cpp/horovod_cpp.h"

namespace {

// `hvd_config_agreement timeline-link`: rank 0's HOROVOD_TIMELINE is a symbolic link (to a
// file that must stay untouched): init() must fail on every rank, rank 0 naming the link,
// the others naming rank 0's timeline.
int timeline_link(int rank) {
  std::string dir, victim, link = "/nonexistent/unused";  // only rank 0 opens its timeline
  if (rank == 0) {
    char tmpl[] = "/tmp/hvd_timeline_link.XXXXXX";
    if (!mkdtemp(tmpl)) return 2;
    dir = tmpl;
    victim = dir + "/victim";
    link = dir + "/timeline.json";
    std::ofstream(victim) << "precious";
    if (symlink(victim.c_str(), link.c_str()) != 0) return 2;
  }
  setenv("HOROVOD_TIMELINE", link.c_str(), 1);
  std::string message;
  try {
    hvd::init();
    std::fprintf(stderr, "rank %d: init accepted a timeline path that is a link\n", rank);
    hvd::shutdown();
    return 2;
  } catch (const hvd::Error& e) {
    message = e.what();
  }
  const std::string want = rank == 0 ? "symbolic link" : "rank 0 could not start its timeline";
  int status = message.find(want) == std::string::npos ? 2 : 0;
  if (rank == 0) {
    std::ifstream f(victim);
    std::string content;
    f >> content;
    if (content != "precious") {
      std::fprintf(stderr, "rank 0: the link's target was overwritten\n");
      status = 2;
    }
    std::remove(link.c_str());
    std::remove(victim.c_str());
    rmdir(dir.c_str());
  }
  std::printf("rank %d: %s: %s\n", rank, status == 0 ? "refused as expected" : "WRONG",
              message.c_str());
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "timeline-link") {
    const char* r = std::getenv("OMPI_COMM_WORLD_RANK");
    if (!r) r = std::getenv("PMI_RANK");
    return timeline_link(r ? std::atoi(r) : 0);
  }
  if (argc < 4) {
    std::fprintf(stderr, "usage: hvd_config_agreement VAR VALUE_AS_SHOWN RANK0_VALUE_AS_SHOWN\n");
    return 64;
  }
  const std::string var = argv[1], value = argv[2], rank0_value = argv[3];
  // The rank before init (init fails): Open MPI and MPICH set these.
  const char* r = std::getenv("OMPI_COMM_WORLD_RANK");
  const char* n = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (!r) r = std::getenv("PMI_RANK");
  if (!n) n = std::getenv("PMI_SIZE");
  const int rank = r ? std::atoi(r) : 0, size = n ? std::atoi(n) : 1;
  std::string message;
  try {
    hvd::init();
    std::fprintf(stderr, "rank %d: init accepted %s differing on rank %d\n", rank, var.c_str(),
                 size - 1);
    hvd::shutdown();
    return 2;
  } catch (const hvd::Error& e) {
    message = e.what();
  }
  const std::string want[] = {var + " must be the same on every rank", "rank 0 has " + rank0_value,
                              "rank " + std::to_string(size - 1) + " has " + value};
  for (const std::string& w : want) {
    if (message.find(w) == std::string::npos) {
      std::fprintf(stderr, "rank %d: the error lacks \"%s\": %s\n", rank, w.c_str(),
                   message.c_str());
      return 2;
    }
  }
  // Only the last rank differs: no other rank may be named.
  for (int other = 1; other < size - 1; ++other) {
    if (message.find("rank " + std::to_string(other) + " has") != std::string::npos) {
      std::fprintf(stderr, "rank %d: the error names rank %d: %s\n", rank, other, message.c_str());
      return 2;
    }
  }
  std::printf("rank %d: init refused as expected: %s\n", rank, message.c_str());
  return 0;
}
