#!/usr/bin/env bash
# A corrupted rank 0 (hvd_corrupt.cc): runs every corruption mode under mpirun with NP ranks;
# each run must end (within 120 s) with status 0, which hvd_corrupt gives only when every rank
# refused every corrupted collective with an error naming it, left its tensor untouched, and
# ran every other collective right.
#   test/fault/run_corrupt.sh PATH/TO/hvd_corrupt NP [MODE...]
# Environment: MPIRUN (default: mpirun --oversubscribe --allow-run-as-root --bind-to none).
set -u
prog=$1 np=$2
shift 2
modes=("$@")
[ ${#modes[@]} -eq 0 ] && modes=(shape dtype op reduce root scalar first_dim splits)
read -r -a mpirun <<< "${MPIRUN:-mpirun --oversubscribe --allow-run-as-root --bind-to none}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
status=0
for mode in "${modes[@]}"; do
  log=$(mktemp /tmp/hvd_corrupt.XXXXXX)
  timeout 120 "${mpirun[@]}" -np "$np" "$prog" "$mode" >"$log" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then
    echo "# corrupt $mode np=$np: ok"
  else
    echo "# corrupt $mode np=$np: FAILED (status $rc)"
    tail -n 30 "$log"
    status=1
  fi
  rm -f "$log"
done
exit $status
