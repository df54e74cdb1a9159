#!/usr/bin/env bash
# The suites and examples under `hvdrun --gloo` (no mpirun; the Gloo controller), at 2 and 3
# workers: the C++ multi-rank suite (test/mpi's cases without MPI of their own, with a library
# preloaded that ends any process calling MPI_Init), the digits example in Python and in C++
# (each checks its accuracy and that every rank ends with the same weights), and the Python
# suite less the tests about MPI itself. Run by scripts/run_tests.sh in builds with Gloo.
#
#   scripts/run_gloo_jobs.sh PYTHON BUILD_DIR
# PYTHON has horovod_cpp installed (with Gloo); BUILD_DIR is a CMake build with tests and
# examples (what is missing there is skipped with a line saying so). NP_LIST (default "2 3").
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${1:?usage: run_gloo_jobs.sh PYTHON BUILD_DIR}
BUILD=${2:?usage: run_gloo_jobs.sh PYTHON BUILD_DIR}
NP_LIST=${NP_LIST:-2 3}
status=0
# step NAME TIMEOUT COMMAND...: runs one job, says PASSED/FAILED with its name.
step() {
  local name=$1 limit=$2; shift 2
  echo "=== $name ==="
  if timeout --kill-after=30 "$limit" "$@"; then
    echo "PASSED: $name"
  else
    echo "FAILED: $name (exit $?)"; status=1
  fi
}
suite="$BUILD/test/unit/gloo/multirank/hvd_gloo_multirank_tests"
no_mpi="$BUILD/test/unit/gloo/multirank/libhvd_no_mpi_init.so"
digits="$BUILD/examples/train_digits"
no_mpi_env=()
[ -f "$no_mpi" ] && no_mpi_env=(env LD_PRELOAD="$no_mpi")
for np_ in $NP_LIST; do
  hvdrun=("$PY" -m horovod_cpp.runner --gloo -np "$np_")
  if [ -x "$suite" ] && [ -f "$no_mpi" ]; then
    HVD_PYTHON="$PY" step "C++ multi-rank suite, hvdrun --gloo -np $np_" 900 \
      bash test/unit/gloo/multirank/run_gloo_multirank.sh "$BUILD" "$np_"
  else
    echo "skipped: $suite (or $no_mpi) is not built"
  fi
  step "examples/python/train_digits.py, hvdrun --gloo -np $np_" 600 "${hvdrun[@]}" "$PY" examples/python/train_digits.py
  if [ -x "$digits" ]; then
    step "examples/train_digits, hvdrun --gloo -np $np_" 600 "${hvdrun[@]}" "${no_mpi_env[@]}" "$digits"
  else
    echo "skipped: $digits is not built (LibTorch)"
  fi
done
# test_build_queries and test_mpi_threads_supported check MPI itself (mpi_enabled() is false
# under Gloo by design).
echo "=== Python suite, hvdrun --gloo ==="
LAUNCHER=gloo NP_LIST="$NP_LIST" PYTHON="$PY" bash test/python/run_mpi_pytests.sh \
  -k "not test_build_queries and not test_mpi_threads_supported" || { echo "FAILED: Python suite under hvdrun --gloo"; status=1; }
[ "$status" = 0 ] && echo "run_gloo_jobs: all passed"
exit "$status"
