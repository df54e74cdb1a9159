#!/usr/bin/env bash
# A real two-host run on one machine: `hvdrun -np 4 -H h1:2,h2:2` across two hosts made of
# network namespaces (each with its own hostname and address, joined by a bridge; Open MPI
# over TCP between them), running test/runner/job_check.py, which checks local/cross ranks,
# that ranks of one host share a host name, and the values of allreduce/allgather/broadcast.
# hvdrun's pre-launch check probes both hosts through the same launch path first.
#
#   sudo test/multihost/run_multihost.sh          (needs root, `ip` and `unshare`)
# Environment: PYTHON (a python with horovod_cpp importable; default .venv/bin/python, else
# python3), SUBNET_PREFIX (default 10.77.0; only <prefix>.1, .11, .12 are used),
# TIMEOUT_S (default 300). The hosts are made by hosts.sh (beside this script).
# Exit: 0 passed, 1 failed, 77 skipped (not root / no network namespaces here). Everything
# made here (namespaces, veth pairs, bridge, /etc/hosts lines) is removed on exit, pass or fail.
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
MH_MARK="# horovod_cpp multihost test $$"
MH_LOCK=/run/lock/horovod_cpp_multihost.lock
# shellcheck source=test/multihost/hosts.sh
. "$here/hosts.sh"  # mh_require, mh_start (and the rest)

mh_require multihost
"$PYTHON" -c "import horovod_cpp.runner" 2>/dev/null || { echo "multihost: $PYTHON cannot import horovod_cpp"; exit 1; }
# One multi-host test at a time on this machine (other checkouts may run theirs).
mh_start multihost 600
tmp=$MH_TMP

echo "multihost: hosts ${MH_HOSTS[*]} at $PFX.11, $PFX.12 (bridge $MH_BR, $PFX.1)"
cd "$root"
timeout --kill-after=30 "$TIMEOUT_S" "$PYTHON" -m horovod_cpp.runner -np 4 -H h1:2,h2:2 \
  --verbose --start-timeout 60 --network-interface "$PFX.0/24" \
  --mpi-args "--mca plm_rsh_agent $tmp/agent --mca btl self,vader,tcp" \
  "$PYTHON" test/runner/job_check.py --local-size 2 --cross-size 2 2>&1 | tee "$tmp/out"
rc=${PIPESTATUS[0]}
if [ "$rc" = 0 ] && grep -q "JOB_CHECK OK size=4 hosts=\['h1', 'h2'\]" "$tmp/out"; then
  echo "multihost: PASSED (4 ranks on h1:2,h2:2)"
  exit 0
fi
echo "multihost: FAILED (exit $rc)"
exit 1
