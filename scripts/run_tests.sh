#!/usr/bin/env bash
# Runs every test: builds, runs CTest (unit tests, multi-rank tests under mpirun with 2, 3
# and 4 ranks, package tests, GPU tests that skip without a device), then installs the Python
# package into a venv and runs the Python tests under mpirun, and the TensorFlow/Keras tests from
# their own venv (when scripts/install_tf_env.sh made it), and the Ray tests from theirs
# (scripts/install_ray_env.sh). Then the hardening runs
# (docs/testing.md): the sanitizer builds (scripts/run_sanitizers.sh), a short fuzzing run
# (scripts/run_fuzzers.sh) and the short soak (scripts/soak.py --short). Set SANITIZERS=0,
# FUZZ=0 or SOAK=0 to skip one of them locally.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
BUILD_DIR=${BUILD_DIR:-build}
BUILD_DIR=$BUILD_DIR bash scripts/build.sh
status=0
FAILED_STEPS=()
# fail NAME: marks the run failed and remembers which step, for the summary.
fail() { status=1; FAILED_STEPS+=("$1"); }
SUMMARY=$(mktemp /tmp/hvd_run_tests_summary.XXXXXX)
ctest --test-dir "$BUILD_DIR" --output-on-failure --timeout 900 2>&1 | tee "$SUMMARY.ctest" \
  || fail "ctest"

if [ -x test/python/run_mpi_pytests.sh ] || [ -f test/python/run_mpi_pytests.sh ]; then
  VENV=$(realpath -m "${VENV:-.venv}")
  if [ ! -x "$VENV/bin/python" ]; then
    /usr/bin/python3 -m venv --system-site-packages "$VENV"
  fi
  "$VENV/bin/python" -m pip install -q . || fail "pip install (.venv)"
  # pip builds the CUDA/NCCL path where the toolkit is (issue 41): nvcc here means it must have.
  if [ -x /usr/local/cuda/bin/nvcc ] || command -v nvcc >/dev/null; then
    "$VENV/bin/python" -c "import sys, horovod_cpp as h; print('pip build: CUDA', h.cuda_built(), 'NCCL', h.nccl_built()); sys.exit(0 if h.cuda_built() else 1)" \
      || fail "pip install built no CUDA path although nvcc is here"
  fi
  PYTHON="$VENV/bin/python" bash test/python/run_mpi_pytests.sh 2>&1 | tee "$SUMMARY.pytest" \
    || fail "pytest"
  # DDP peer benchmark, correctness only: both exchanges give the exact averaged-SGD parameters.
  timeout --kill-after=30 600 mpirun --oversubscribe --allow-run-as-root -np 2 "$VENV/bin/python" examples/benchmark/ddp_vs_hvd.py --smoke || fail "ddp_vs_hvd --smoke"
  # The launcher (hvdrun starts mpirun itself, so these run outside mpirun).
  HVD_DIGITS_ELASTIC=$(realpath -m "$BUILD_DIR/examples/digits_elastic") \
  HVDRUN_REQUIRE_SCRIPT=1 "$VENV/bin/python" -m pytest -p no:cacheprovider -q test/runner || fail "pytest test/runner"
  # Two hosts made of network namespaces (about 30 s; exit 77 = skipped where not root).
  PYTHON="$VENV/bin/python" bash test/multihost/run_multihost.sh; rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 77 ] || fail "multihost (exit $rc)"
  # The same two hosts under hvdrun --gloo (no mpirun): the library job, the digits job and the
  # C++ multi-rank suite when built with Gloo (about 70 s).
  BUILD_DIR="$BUILD_DIR" PYTHON="$VENV/bin/python" bash test/multihost/run_multihost.sh --gloo; rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 77 ] || fail "multihost gloo (exit $rc)"
  # An elastic job on the same two hosts, one host's network cut mid-job (about 40 s).
  PYTHON="$VENV/bin/python" bash test/multihost/run_multihost.sh --elastic; rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 77 ] || fail "multihost elastic (exit $rc)"
  # A torchrun agent on each of the two hosts (no hvdrun, no mpirun; about 20 s).
  PYTHON="$VENV/bin/python" bash test/multihost/run_multihost.sh --torchrun; rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 77 ] || fail "multihost torchrun (exit $rc)"
  # Under the Gloo controller (hvdrun --gloo: no mpirun), in builds with Gloo (issue 36). The
  # fault tests (a killed worker, re-init at size 2, the fixed job's exit) are in test/runner.
  if "$VENV/bin/python" -c "import sys, horovod_cpp; sys.exit(0 if horovod_cpp.gloo_built() else 1)"; then
    bash scripts/run_gloo_jobs.sh "$VENV/bin/python" "$BUILD_DIR" || fail "jobs under hvdrun --gloo"
  else
    echo "hvdrun --gloo jobs skipped: this build has no Gloo"
  fi
  # Fault injection through horovod_cpp.torch (the C++ twin runs in CTest).
  for np_ in 2 3; do
    bash test/fault/run_faults.sh python "$VENV/bin/python" "$np_" || fail "python faults np=$np_"
  done
fi

# TensorFlow / Keras: their own venv (scripts/install_tf_env.sh); the package is built there
# with the TensorFlow op library, in a build folder of its own.
TF_VENV=$(realpath -m "${TF_VENV:-.venv-tf}")
if [ -x "$TF_VENV/bin/python" ]; then
  # CPU only there: the TensorFlow tests run on CPU, and the CUDA build is checked in .venv.
  HOROVOD_CPP_WITH_CUDA=OFF "$TF_VENV/bin/python" -m pip install -q . --config-settings=build-dir=build-py/pip-tf || fail "pip install (TensorFlow venv)"
  PYTHON="$TF_VENV/bin/python" bash test/python/run_mpi_pytests.sh ../tensorflow 2>&1 \
    | tee "$SUMMARY.pytest-tf" || fail "pytest (TensorFlow venv)"
  # The examples check themselves (accuracy >= 95%, identical weights, w=2 b=10; the Keras
  # peer benchmark's smoke: weights equal on every rank and to a one-rank reference).
  for ex in tensorflow/keras_digits.py tensorflow/custom_loop_digits.py \
            tensorflow/tf1_linear_regression.py "benchmark/mwms_vs_hvd.py --smoke --models mlp"; do
    echo "=== examples/$ex under mpirun -np 2 ==="
    log=$(mktemp /tmp/hvd_tf_example.XXXXXX)
    rc=0
    # shellcheck disable=SC2086  # $ex is a path and its arguments
    timeout --kill-after=30 600 mpirun --oversubscribe --allow-run-as-root -np 2 \
      -x TF_CPP_MIN_LOG_LEVEL=2 "$TF_VENV/bin/python" examples/$ex \
      > "$log" 2>&1 || rc=$?
    grep -E "held-out|^w = |\.hvd " "$log" || true
    if [ "$rc" -ne 0 ]; then echo "FAILED: examples/$ex"; tail -n 30 "$log"; fail "examples/$ex"; fi
  done
else
  echo "TensorFlow tests skipped: no $TF_VENV (made by scripts/install_tf_env.sh)"
fi

# Ray (horovod_cpp.ray): its own venv (scripts/install_ray_env.sh), one local Ray cluster
# started by the tests. CI makes the venv, so there the tests must run.
RAY_VENV=$(realpath -m "${RAY_VENV:-.venv-ray}")
if [ -x "$RAY_VENV/bin/python" ]; then
  "$RAY_VENV/bin/python" -m pip install -q . || fail "pip install (Ray venv)"
  timeout --kill-after=30 1200 "$RAY_VENV/bin/python" -m pytest -p no:cacheprovider -q test/ray \
    2>&1 | tee "$SUMMARY.pytest-ray" || fail "pytest test/ray (Ray venv)"
  # A Ray cluster whose worker nodes are two network-namespace hosts: RayExecutor across
  # them, and an elastic job that loses one host and grows back when it returns (about 60 s;
  # exit 77 = skipped where not root).
  PYTHON="$RAY_VENV/bin/python" bash test/multihost/run_multihost.sh --ray; rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 77 ] || fail "multihost ray (exit $rc)"
elif [ "${CI:-}" = true ]; then
  echo "Ray tests: no $RAY_VENV in CI (scripts/install_ray_env.sh should have made it)"
  fail "Ray venv missing"
else
  echo "Ray tests skipped: no $RAY_VENV (made by scripts/install_ray_env.sh)"
fi

if [ "${SOAK:-1}" != 0 ]; then
  python3 scripts/soak.py --short --build-dir "$BUILD_DIR" || fail "soak"
  # The soak's check must catch a real leak (hvd_bench --debug-leak): a check that cannot fail
  # proves nothing.
  python3 scripts/soak.py --self-test --build-dir "$BUILD_DIR" || fail "soak self-test"
fi
if [ "${FUZZ:-1}" != 0 ]; then
  bash scripts/run_fuzzers.sh || fail "fuzzers"
fi
if [ "${SANITIZERS:-1}" != 0 ]; then
  bash scripts/run_sanitizers.sh || fail "sanitizers"
fi

# The main build's CTest and the Python suites' closing lines once more, last (the hardening
# runs above print CTest summaries of their own subsets).
echo "=== summary ==="
grep -h -E '^pytest: ' "$SUMMARY.pytest-tf" 2>/dev/null | sed 's/^pytest:/pytest (TensorFlow venv):/' || true
grep -h -E '^pytest: ' "$SUMMARY.pytest" 2>/dev/null || true
grep -h -E '^[0-9]+ (passed|failed)' "$SUMMARY.pytest-ray" 2>/dev/null | sed 's/^/pytest (Ray venv): /' || true
grep -h -E 'tests passed, .* tests failed out of' "$SUMMARY.ctest" || true
rm -f "$SUMMARY" "$SUMMARY".*
if [ "$status" = 0 ]; then
  echo "run_tests: all passed"
else
  for step in "${FAILED_STEPS[@]}"; do echo "run_tests: step failed: $step"; done
  echo "run_tests: FAILED (see above)"
fi
exit $status
