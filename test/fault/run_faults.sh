#!/usr/bin/env bash
# Fault injection: runs each fault under mpirun and checks that every surviving rank ends
# within the bound, with the expected status and a message naming the faulty rank, and that
# nothing is left in /dev/shm or /tmp (also after SIGKILL).
#
#   test/fault/run_faults.sh cpp PATH/TO/hvd_fault NP      (C++ program, test/fault/hvd_fault.cc)
#   test/fault/run_faults.sh python PYTHON NP              (horovod_cpp.torch, fault_torch.py)
# Environment: MPIRUN (default: mpirun --oversubscribe --allow-run-as-root --bind-to none).
# Prints one line per fault with the measured end time (from the moment the victim injects
# its fault; from the start of the job for faults at init); exits non-zero if any check failed.
set -u
kind=$1 prog=$2 np=$3
here="$(cd "$(dirname "$0")" && pwd)"
read -r -a mpirun <<< "${MPIRUN:-mpirun --oversubscribe --allow-run-as-root --bind-to none --mca btl_vader_single_copy_mechanism none}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
logdir="$(mktemp -d /tmp/hvd_faults.XXXXXX)"
victim=$((np - 1))
stall_shutdown=5
# A shared-memory segment (2 chunks + a header per rank) larger than all of /dev/shm.
shm_total=$(( $(stat -f -c '%b * %S' /dev/shm) ))
status=0

# Our segments whose owner (rank 0's pid is in the name) is gone: leaked.
leaked_segments() {
  local f pid
  for f in /dev/shm/hvdcpp.*; do
    [ -e "$f" ] || continue
    pid="${f#/dev/shm/hvdcpp.}"; pid="${pid%%.*}"
    kill -0 "$pid" 2>/dev/null || echo "$f"
  done
}

# Entries of /tmp made since marker $1 that outlived their job: anything named after
# horovod_cpp, and Open MPI session directories (pid.N) whose mpirun is gone.
leaked_tmp() {
  local f pid
  find /tmp -maxdepth 1 -newer "$1" \( -iname '*hvdcpp*' -o -iname '*horovod*' \) 2>/dev/null
  for f in $(find /tmp/ompi.* -maxdepth 1 -name 'pid.*' -newer "$1" 2>/dev/null); do
    pid="${f##*/pid.}"
    kill -0 "$pid" 2>/dev/null || echo "$f"
  done
}

# run_case NAME EXPECT(nonzero|zero) BOUND_S REGEX [ENV=VALUE...] -- ARGS...
run_case() {
  local name=$1 expect=$2 bound=$3 regex=$4; shift 4
  local envs=()
  while [ "$1" != "--" ]; do envs+=(-x "$1"); export "${1?}"; shift; done
  shift
  local log="$logdir/$name.log" t0 t1 rc ok=1 why=""
  touch "$logdir/start"
  t0=$(date +%s.%N)
  timeout 120 "${mpirun[@]}" -np "$np" "${envs[@]}" "$@" > "$log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  # From the moment the victim injected its fault, when it says so (else from the start).
  local tf; tf=$(grep -oE 'injecting fault at [0-9.]+' "$log" | head -1 | awk '{print $4}')
  [ -n "$tf" ] && t0=$tf
  for e in "${envs[@]}"; do [ "$e" != -x ] && unset "${e%%=*}"; done
  local secs; secs=$(awk "BEGIN { printf \"%.1f\", $t1 - $t0 }")
  # (mpirun's own status after a SIGKILLed rank is 137 too: the time tells a hang apart.)
  if [ "$rc" -eq 124 ]; then ok=0; why="hung (killed at 120 s)"; fi
  if [ "$expect" = nonzero ] && [ "$rc" -eq 0 ]; then ok=0; why="$why exit status 0"; fi
  if [ "$expect" = zero ] && [ "$rc" -ne 0 ]; then ok=0; why="$why exit status $rc"; fi
  if awk "BEGIN { exit !($t1 - $t0 > $bound) }"; then ok=0; why="$why took ${secs} s > ${bound} s"; fi
  if ! grep -qE "$regex" "$log"; then ok=0; why="$why no message matching /$regex/"; fi
  if grep -q "Bus error\|SIGBUS" "$log"; then ok=0; why="$why SIGBUS"; fi
  sleep 0.5
  local leaks; leaks="$(leaked_segments)"
  if [ -n "$leaks" ]; then ok=0; why="$why left in /dev/shm: $leaks"; rm -f $leaks; fi
  # /tmp: nothing of ours, and no Open MPI session directory of a job that has ended.
  local left; left="$(leaked_tmp "$logdir/start")"
  if [ -n "$left" ]; then ok=0; why="$why left in /tmp: $left"; fi
  if [ "$ok" -eq 1 ]; then
    echo "PASS $kind np=$np $name: ended in ${secs} s (bound ${bound} s), status $rc"
  else
    echo "FAIL $kind np=$np $name: ${why# } (status $rc, ${secs} s); output:"
    tail -n 40 "$log"
    status=1
  fi
}

stall_env=(HOROVOD_STALL_CHECK_TIME_SECONDS=2 HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=$stall_shutdown)
bound=$((stall_shutdown + 10))
if [ "$kind" = cpp ]; then
  run_case kill nonzero 10 "rank $victim" -- "$prog" kill
  run_case throw nonzero 10 "rank $victim" -- "$prog" throw
  run_case exit nonzero 10 "rank $victim" -- "$prog" exit
  run_case stall nonzero "$bound" "missing on rank $victim" "${stall_env[@]}" -- "$prog" stall
  run_case local zero 10 "rank $victim: .*null" -- "$prog" local
  run_case version nonzero 10 "rank $victim runs 99.0.0-fake" -- "$prog" version
  run_case shm_too_small zero 30 "bytes there per rank" HOROVOD_CPP_SHM_MIN_BYTES=0 \
    "HOROVOD_CPP_SHM_CHUNK_BYTES=$shm_total" -- "$prog" shm
  run_case thread_level zero 30 "rank $victim: init refused: .*MPI_THREAD_MULTIPLE" -- "$prog" serialized
else
  script="$here/fault_torch.py"
  run_case kill nonzero 10 "rank $victim" -- "$prog" "$script" kill
  run_case raise nonzero 10 "rank $victim" -- "$prog" "$script" raise
  run_case exit nonzero 10 "rank $victim" -- "$prog" "$script" exit
  run_case stall nonzero "$bound" "missing on rank $victim" "${stall_env[@]}" -- "$prog" "$script" stall
  run_case local zero 10 "rank $victim: .*bool" -- "$prog" "$script" local
fi
rm -rf "$logdir"
exit $status
