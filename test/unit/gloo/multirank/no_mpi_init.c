/* Copyright horovod_cpp authors. Preloaded into a Gloo job's workers by the multi-rank Gloo
 * tests: any call of MPI_Init or MPI_Init_thread ends the process with status 97 and says so,
 * so a test proves that a HOROVOD_GLOO=1 program never initializes MPI. */
#include <stdio.h>
#include <unistd.h>

static void refuse(const char* call) {
  fprintf(stderr, "horovod_cpp Gloo test: %s was called in a Gloo job\n", call);
  fflush(stderr);
  _exit(97);
}
int MPI_Init(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  refuse("MPI_Init");
  return 1;
}
int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  (void)argc;
  (void)argv;
  (void)required;
  (void)provided;
  refuse("MPI_Init_thread");
  return 1;
}
