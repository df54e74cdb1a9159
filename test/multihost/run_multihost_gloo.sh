#!/usr/bin/env bash
# The two-host job under the Gloo controller: `hvdrun --gloo -np 4 -H h1:2,h2:2` across two
# hosts made of network namespaces (hosts.sh), no mpirun: hvdrun serves the rendezvous on the
# bridge address and starts the workers through the rsh agent, as it would over ssh.
#   1. test/runner/gloo_worker.py: every worker reads its place from the environment and its
#      assignment from the store (over the hosts' network), and they meet through the store.
#   2. When this build has Gloo (horovod_cpp.gloo_built()): test/runner/job_check.py, the
#      library's own collectives between the two hosts (local/cross ranks, values).
#
#   sudo test/multihost/run_multihost_gloo.sh     (needs root, `ip` and `unshare`)
# Environment: PYTHON, SUBNET_PREFIX, TIMEOUT_S, as run_multihost.sh.
# Exit: 0 passed, 1 failed, 77 skipped. Everything made here is removed on exit.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
PFX=${SUBNET_PREFIX:-10.77.0}
TIMEOUT_S=${TIMEOUT_S:-300}
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$root/.venv/bin/python" ]; then PYTHON="$root/.venv/bin/python"; else PYTHON=python3; fi
fi
MH_BR=hvdmhbr0
MH_NS=hvdmh_
MH_PFX=$PFX
MH_HOSTS=(h1 h2)
MH_MARK="# horovod_cpp multihost gloo test $$"
MH_LOCK=/run/lock/horovod_cpp_multihost.lock
# shellcheck source=test/multihost/hosts.sh
. "$here/hosts.sh"

mh_require multihost-gloo
"$PYTHON" -c "import horovod_cpp.runner" 2>/dev/null || { echo "multihost-gloo: $PYTHON cannot import horovod_cpp"; exit 1; }
mh_start multihost-gloo 600
tmp=$MH_TMP
cd "$root"
echo "multihost-gloo: hosts ${MH_HOSTS[*]} at $PFX.11, $PFX.12 (bridge $MH_BR, $PFX.1)"

# hvdrun_gloo LOG ARGS...: the job on h1:2,h2:2, its output in LOG; returns hvdrun's status.
hvdrun_gloo() {
  local log=$1; shift
  timeout --kill-after=30 "$TIMEOUT_S" "$PYTHON" -m horovod_cpp.runner --gloo -np 4 \
    -H h1:2,h2:2 --verbose --start-timeout 60 --network-interface "$PFX.0/24" \
    --rsh-agent "$tmp/agent" "$@" 2>&1 | tee "$log"
  return "${PIPESTATUS[0]}"
}

hvdrun_gloo "$tmp/out1" "$PYTHON" test/runner/gloo_worker.py; rc=$?
if [ "$rc" != 0 ] || ! grep -q "GLOO_WORKER OK size=4" "$tmp/out1" ||
   ! grep -q "rendezvous store on $PFX.1:" "$tmp/out1"; then
  echo "multihost-gloo: FAILED (launcher job, exit $rc)"; exit 1
fi
for r in 2 3; do  # ranks 2 and 3 ran on h2 and saw it as their host
  grep -q "^\[1,$r\]<stdout>:GLOO_ENV .*\"host\": \"h2\"" "$tmp/out1" ||
    { echo "multihost-gloo: FAILED (rank $r did not report host h2)"; exit 1; }
done
echo "multihost-gloo: launcher job PASSED (4 workers on h1:2,h2:2)"

if ! "$PYTHON" -c "import sys, horovod_cpp; sys.exit(0 if horovod_cpp.gloo_built() else 1)"; then
  echo "multihost-gloo: this build has no Gloo; the library job is skipped"
  exit 0
fi
hvdrun_gloo "$tmp/out2" "$PYTHON" test/runner/job_check.py --local-size 2 --cross-size 2; rc=$?
if [ "$rc" = 0 ] && grep -q "JOB_CHECK OK size=4 hosts=\['h1', 'h2'\]" "$tmp/out2"; then
  echo "multihost-gloo: PASSED (library job, 4 ranks on h1:2,h2:2 under Gloo)"
  exit 0
fi
echo "multihost-gloo: FAILED (library job, exit $rc)"
exit 1
