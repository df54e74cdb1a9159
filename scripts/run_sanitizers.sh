#!/usr/bin/env bash
# Sanitizer runs (called by scripts/run_tests.sh; docs/testing.md):
#   asan  AddressSanitizer + UndefinedBehaviorSanitizer build (HOROVOD_CPP_SANITIZE=ON): the
#         unit tests, the fuzz-corpus replays, and the multi-rank suite at 2 and 3 ranks on
#         each CPU data path (default, MPI only, shared memory only);
#         a corrupted rank 0's responses refused at 2 and 3 ranks (test/fault/run_corrupt.sh);
#         timed-out waits in the training API with a stalled peer;
#   tsan  ThreadSanitizer build (HOROVOD_CPP_SANITIZE_THREAD=ON): the unit tests (among them
#         unit_transports_in_process: the real shm and hier transports with thread-ranks, so
#         their setup and shared-memory waits run under TSan too) and the multi-rank suite at
#         2 ranks (default data path).
# Only the library and the test executables are built (no examples, bindings, adapters or
# CUDA), each in its own build directory. Any sanitizer report fails the run: ASan/UBSan/TSan
# stop the rank, mpirun then ends the job, and the test fails.
#   bash scripts/run_sanitizers.sh [asan] [tsan]     (default: both)
# Suppressions (only for Open MPI's own code, each entry explained) are in test/sanitizers/.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
WHICH=("$@")
[ ${#WHICH[@]} -eq 0 ] && WHICH=(asan tsan)
JOBS=${JOBS:-$(nproc)}
status=0

configure_and_build() {  # dir, cmake flags...
  local dir=$1
  shift
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHOROVOD_CPP_BUILD_TESTS=ON \
    -DHOROVOD_CPP_BUILD_EXAMPLES=OFF -DHOROVOD_CPP_BUILD_PYTHON=OFF \
    -DHOROVOD_CPP_WITH_CUDA=OFF -DHOROVOD_CPP_WITH_TORCH=OFF "$@" >/dev/null
  cmake --build "$dir" -j"$JOBS" --target hvd_unit_tests hvd_gloo_unit_tests hvd_mpi_tests \
    fuzz_wire fuzz_controller fuzz_config fuzz_json_escape fuzz_execute hvd_corrupt \
    hvd_finalize_without_shutdown
}

for which in "${WHICH[@]}"; do
  start=$(date +%s)
  case $which in
    asan)
      dir=${ASAN_BUILD_DIR:-build-asan}
      configure_and_build "$dir" -DHOROVOD_CPP_SANITIZE=ON
      # The ranks (not mpirun) get test/sanitizers/no_dlclose.c preloaded, after the ASan
      # runtime, so that LeakSanitizer can name Open MPI's unloaded components; the full
      # unwinder names the callers of libc's allocation functions (vasprintf) as well.
      cc -shared -fPIC -o "$dir/libno_dlclose.so" test/sanitizers/no_dlclose.c
      export OMPI_MCA_mca_base_env_list="LD_PRELOAD=$(${CXX:-c++} -print-file-name=libasan.so):$(realpath "$dir")/libno_dlclose.so"
      # intercept_tls_get_addr=0: GCC 12's runtime (as LLVM's up to 16) takes a dynamic TLS
      # block whose address lies 16 bytes into a page for a glibc-2.19 block with a header,
      # reads a range from the two words before it, and LeakSanitizer's exit-time scan of that
      # range then crashes ("Tracer caught signal 11" in ScanRangeForPointers, after every test
      # passed): a fixed bug of the runtime that struck mpi_core_np3 in CI. Off, dynamic TLS
      # blocks are not scanned for pointers; the library's own thread-locals are static TLS.
      export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:fast_unwind_on_malloc=0:intercept_tls_get_addr=0"
      export LSAN_OPTIONS="suppressions=$ROOT/test/sanitizers/lsan.supp:print_suppressions=0"
      export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1"
      # Timed-out waits with a stalled peer in the training API: nothing in flight may be freed.
      # (The LibTorch adapter runs the same engine, csrc/training/grad_reducer.h; its own
      # timeout test runs in the main build's CTest, not under ASan.)
      cmake --build "$dir" -j"$JOBS" --target hvd_training_errors_tests
      ctest --test-dir "$dir" --output-on-failure --timeout 600 \
        -R '^(unit_.*|fuzz_.*_replay|mpi_core(_mpi_only|_shm_only)?_np[23]|training_errors_np[23]|fault_corrupt_response_np[23]|finalize_without_shutdown_.*_np2)$' || status=1
      unset ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS OMPI_MCA_mca_base_env_list
      ;;
    tsan)
      dir=${TSAN_BUILD_DIR:-build-tsan}
      configure_and_build "$dir" -DHOROVOD_CPP_SANITIZE_THREAD=ON
      # history_size=7 (the most): the suppressions match a report by the frames of both
      # accesses, and with the default history the other access's stack is often lost ("failed
      # to restore the stack") when it was made inside Open MPI by whichever thread progressed
      # a request: such a report names only our side and cannot be matched.
      export TSAN_OPTIONS="suppressions=$ROOT/test/sanitizers/tsan.supp:halt_on_error=1:abort_on_error=1:second_deadlock_stack=1:print_suppressions=0:history_size=7"
      # TSan needs the shadow memory layout that address-space randomization can break on
      # recent kernels ("unexpected memory mapping"): run with randomization off.
      setarch "$(uname -m)" -R ctest --test-dir "$dir" --output-on-failure --timeout 900 \
        -R '^(unit_.*|mpi_core_np2)$' || status=1
      unset TSAN_OPTIONS
      ;;
    *)
      echo "run_sanitizers.sh: unknown run '$which' (asan or tsan)" >&2
      exit 2
      ;;
  esac
  echo "# sanitizers: $which took $(( $(date +%s) - start )) s (build + tests)"
done
exit $status
