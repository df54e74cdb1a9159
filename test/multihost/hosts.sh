# Test hosts made of network namespaces on this machine: sourced (not run) by
# test/multihost/run_multihost.sh and examples/benchmark/multihost_bench.sh.
#
# Each host hN is a network namespace with an `eth0` at <prefix>.1N/24 (N = 1, 2, ...), joined
# by a bridge at <prefix>.1 in the root namespace, and named in /etc/hosts; an rsh agent for
# Open MPI runs a command inside a host's namespace under that host's own hostname (without
# it Open MPI takes both hosts for one node and uses shared memory between them).
# Only <prefix>.1 and <prefix>.1N are ever used. Needs root, `ip`, `unshare` and `flock`.
#
# Set before sourcing (all required):
#   MH_BR      bridge name                         (the test: hvdmhbr0)
#   MH_NS      prefix of namespace and veth names  (the test: hvdmh_; name = prefix + host)
#   MH_PFX     subnet prefix, three octets         (the test: 10.77.0)
#   MH_HOSTS   array of host names                 (the test: h1 h2)
#   MH_MARK    marker ending this user's /etc/hosts lines (include $$)
#   MH_LOCK    lock file: one user of these names at a time on this machine
# Functions:
#   mh_lock [SECONDS]   take MH_LOCK (fd 9), waiting up to SECONDS (default 600); 1 if not
#   mh_check_free       1 (with a message) if the subnet, bridge or a host name is taken
#   mh_up               make bridge, namespaces, veths, routes, /etc/hosts lines (set -e
#                       inside; 1 on the first failure)
#   mh_agent FILE       write the rsh agent to FILE
#   mh_down             remove everything mh_up made (safe to call at any point, twice too)
#   mh_require WHO      exit 77 (skipped, "WHO: SKIPPED: ...") unless root with ip and unshare
#   mh_start WHO [SECONDS]
#                       the whole start: mh_lock (exit 1 if taken), a trap that runs mh_down
#                       and removes MH_TMP on exit, mh_check_free, MH_TMP (a temporary
#                       folder), mh_up, and the rsh agent at $MH_TMP/agent; exit 1 on failure

mh_lock() {
  exec 9>"$MH_LOCK"
  flock -w "${1:-600}" 9
}

mh_check_free() {
  if [ -n "$(ip -o addr show to "$MH_PFX.0/24" 2>/dev/null)" ] || ip link show "$MH_BR" >/dev/null 2>&1; then
    echo "multihost: $MH_PFX.0/24 or $MH_BR is already in use here; set SUBNET_PREFIX or remove it"
    return 1
  fi
  local h
  for h in "${MH_HOSTS[@]}"; do
    if grep -qE "^[^#]*[[:space:]]$h([[:space:]]|\$)" /etc/hosts; then
      echo "multihost: /etc/hosts already names $h; remove that line first"; return 1
    fi
    if ip netns list 2>/dev/null | grep -qE "^$MH_NS$h( |\$)"; then
      echo "multihost: network namespace $MH_NS$h already exists; remove it first"; return 1
    fi
  done
  return 0
}

mh_up() (
  set -e
  ip link add "$MH_BR" type bridge
  ip addr add "$MH_PFX.1/24" dev "$MH_BR"
  ip link set "$MH_BR" up
  i=0
  for h in "${MH_HOSTS[@]}"; do
    i=$((i + 1)); ns="$MH_NS$h"; addr="$MH_PFX.1$i"
    ip netns add "$ns"
    ip link add "$MH_NS$h" type veth peer name eth0 netns "$ns"
    ip link set "$MH_NS$h" master "$MH_BR" up
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    ip -n "$ns" route add default via "$MH_PFX.1"
    echo "$addr $h $MH_MARK" >> /etc/hosts
  done
)

mh_agent() {
  cat > "$1" <<AGENT
#!/bin/bash
while [ \$# -gt 0 ] && [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1; shift
exec ip netns exec "$MH_NS\$host" unshare --uts bash -c "hostname \$host; \$*"
AGENT
  chmod +x "$1"
}

mh_down() {
  local h
  for h in "${MH_HOSTS[@]}"; do
    ip netns del "$MH_NS$h" 2>/dev/null
    ip link del "$MH_NS$h" 2>/dev/null
  done
  ip link del "$MH_BR" 2>/dev/null
  sed -i "/$MH_MARK\$/d" /etc/hosts
  return 0
}

mh_require() {
  [ "$(id -u)" = 0 ] || { echo "$1: SKIPPED: needs root (network namespaces)"; exit 77; }
  command -v ip >/dev/null && command -v unshare >/dev/null ||
    { echo "$1: SKIPPED: needs ip and unshare"; exit 77; }
}

mh_cleanup() {
  mh_down
  [ -n "${MH_TMP:-}" ] && rm -rf "$MH_TMP"
  return 0
}

mh_start() {
  mh_lock "${2:-600}" || { echo "$1: another user of these hosts holds $MH_LOCK"; exit 1; }
  trap mh_cleanup EXIT
  trap 'exit 1' INT TERM
  mh_check_free || exit 1
  MH_TMP="$(mktemp -d "/tmp/$1.XXXXXX")"
  mh_up || exit 1
  mh_agent "$MH_TMP/agent"
}
