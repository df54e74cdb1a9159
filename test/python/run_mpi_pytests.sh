#!/usr/bin/env bash
# Runs the Python tests under mpirun with 2 and 3 ranks; every rank runs pytest.
# LAUNCHER=gloo runs them under `hvdrun --gloo` instead (no mpirun; the Gloo controller).
# Exits non-zero if any rank fails (mpirun propagates a non-zero exit), if a run hangs
# (timeout), or if a rank ran no test.
#
#   test/python/run_mpi_pytests.sh [pytest args...]
# Environment: PYTHON (default: /work/main/.venv/bin/python if it exists, else python3),
#   NP_LIST (default "2 3"), TIMEOUT_S per run (default 600), HVD_TEST_TIMEOUT_S per test
#   (default 180; conftest.py ends a rank whose test runs longer). The package must be installed
#   (pip install .) or on PYTHONPATH (e.g. build-py/bindings/python).
set -u
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$root/.venv/bin/python" ]; then PYTHON="$root/.venv/bin/python"; else PYTHON=python3; fi
fi
NP_LIST="${NP_LIST:-2 3}"
TIMEOUT_S="${TIMEOUT_S:-600}"
logdir="$(mktemp -d /tmp/hvd_pytests.XXXXXX)"
# Fail fast instead of hanging when a rank dies mid-collective.
export HOROVOD_STALL_SHUTDOWN_TIME_SECONDS="${HOROVOD_STALL_SHUTDOWN_TIME_SECONDS:-120}"

export_args=(-x HOROVOD_STALL_SHUTDOWN_TIME_SECONDS)
[ -n "${PYTHONPATH:-}" ] && export_args+=(-x PYTHONPATH)
[ -n "${HVD_TEST_TIMEOUT_S:-}" ] && export_args+=(-x HVD_TEST_TIMEOUT_S)  # per test (conftest.py)

status=0
for np_ in $NP_LIST; do
  what="mpirun -np $np_"
  launch=(mpirun --oversubscribe --allow-run-as-root -np "$np_" "${export_args[@]}")
  if [ "${LAUNCHER:-mpi}" = gloo ]; then
    # hvdrun --gloo gives its local workers its whole environment: nothing to export.
    what="hvdrun --gloo -np $np_"
    launch=("$PYTHON" -m horovod_cpp.runner --gloo -np "$np_")
  fi
  echo "=== pytest under $what (logs: $logdir/np$np_.rank*.log) ==="
  timeout --kill-after=30 "$TIMEOUT_S" "${launch[@]}" \
    bash -c 'r=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${HOROVOD_RANK:-0}}}; cd "$0" &&
      exec "$1" -m pytest -p no:cacheprovider -q "${@:3}" > "$2.rank$r.log" 2>&1' \
    "$here" "$PYTHON" "$logdir/np$np_" "$@"
  rc=$?
  for f in "$logdir"/np"$np_".rank*.log; do
    r="${f##*.rank}"; r="${r%.log}"
    last="$(grep -E '(passed|failed|error|no tests ran)' "$f" | tail -1)"
    echo "np=$np_ rank $r: ${last:-<no summary>}"
    if ! grep -qE '^[0-9]+ passed|[ ,][0-9]+ passed' "$f" || grep -qE '[0-9]+ (failed|error)' "$f"; then
      echo "--- np=$np_ rank $r output ---"; tail -n 80 "$f"
      [ "$rc" -eq 0 ] && rc=1
    fi
  done
  if [ "$rc" -ne 0 ]; then
    echo "FAILED: $what exited with $rc"
    status=1
  fi
done
[ "$status" -eq 0 ] && echo "All ranks passed for np in: $NP_LIST"
# One closing line over every rank of every run, in the plain 'N passed, N failed' form.
passed=0 failed=0 skipped=0
for f in "$logdir"/np*.rank*.log; do
  line="$(grep -E '^[^ ]*[0-9]+ (passed|failed)' "$f" | tail -1)"
  p="$(echo "$line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+')"
  q="$(echo "$line" | grep -oE '[0-9]+ (failed|error)' | awk '{s+=$1} END {print s+0}')"
  k="$(echo "$line" | grep -oE '[0-9]+ skipped' | grep -oE '[0-9]+')"
  passed=$((passed + ${p:-0})); failed=$((failed + ${q:-0})); skipped=$((skipped + ${k:-0}))
done
[ "$status" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1
echo "pytest: $passed passed, $failed failed, $skipped skipped"
exit "$status"
