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
# TIMEOUT_S (default 300).
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
BR=hvdmhbr0
HOSTS=(h1 h2)
MARK="# horovod_cpp multihost test $$"

skip() { echo "multihost: SKIPPED: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (network namespaces)"
command -v ip >/dev/null && command -v unshare >/dev/null || skip "needs ip and unshare"
"$PYTHON" -c "import horovod_cpp.runner" 2>/dev/null || { echo "multihost: $PYTHON cannot import horovod_cpp"; exit 1; }

# One multi-host test at a time on this machine (other checkouts may run theirs).
exec 9>/run/lock/horovod_cpp_multihost.lock
flock -w 600 9 || { echo "multihost: another multi-host test holds the lock"; exit 1; }

cleanup() {
  for h in "${HOSTS[@]}"; do
    ip netns del "hvdmh_$h" 2>/dev/null
    ip link del "hvdmh_$h" 2>/dev/null
  done
  ip link del "$BR" 2>/dev/null
  sed -i "/$MARK\$/d" /etc/hosts
  [ -n "${tmp:-}" ] && rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

if [ -n "$(ip -o addr show to "$PFX.0/24" 2>/dev/null)" ] || ip link show "$BR" >/dev/null 2>&1; then
  echo "multihost: $PFX.0/24 or $BR is already in use here; set SUBNET_PREFIX or remove it"
  exit 1
fi
for h in "${HOSTS[@]}"; do
  if grep -qE "^[^#]*[[:space:]]$h([[:space:]]|\$)" /etc/hosts; then
    echo "multihost: /etc/hosts already names $h; remove that line first"; exit 1
  fi
done

tmp="$(mktemp -d /tmp/hvd_multihost.XXXXXX)"
set -e
ip link add "$BR" type bridge
ip addr add "$PFX.1/24" dev "$BR"
ip link set "$BR" up
i=0
for h in "${HOSTS[@]}"; do
  i=$((i + 1)); ns="hvdmh_$h"; addr="$PFX.1$i"
  ip netns add "$ns"
  ip link add "hvdmh_$h" type veth peer name eth0 netns "$ns"
  ip link set "hvdmh_$h" master "$BR" up
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  ip -n "$ns" route add default via "$PFX.1"
  echo "$addr $h $MARK" >> /etc/hosts
done
# The rsh agent: runs Open MPI's daemon inside the host's namespace, under its own hostname
# (without it Open MPI would take both hosts for one and use shared memory between them).
cat > "$tmp/agent" <<AGENT
#!/bin/bash
while [ \$# -gt 0 ] && [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1; shift
exec ip netns exec "hvdmh_\$host" unshare --uts bash -c "hostname \$host; \$*"
AGENT
chmod +x "$tmp/agent"
set +e

echo "multihost: hosts ${HOSTS[*]} at $PFX.11, $PFX.12 (bridge $BR, $PFX.1)"
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
