"""Ray across machines: a Ray cluster whose worker nodes are the network-namespace hosts of
run_multihost.sh (each its own address, reached only through the bridge), with the driver and
the head node (no CPUs: no worker runs there) in the root namespace. Run by
`run_multihost.sh --ray` with the Ray venv's python, after it made the hosts:

    ray_hosts.py NS_PREFIX SUBNET_PREFIX HOST1 HOST2

1. RayExecutor(num_hosts=2, num_workers_per_host=2): one host per node, named by the node's
   address, local and cross ranks as under hvdrun, the store on the driver node's address
   (not loopback: the workers are on other machines), every collective checked.
2. ElasticRayExecutor(min_workers=2, max_workers=4): 4 workers on the two hosts; once the last
   rank commits test_ray_elastic.MARK_STEP, every process of HOST2 is SIGKILLed (its raylet
   and workers: a machine lost); the job goes on with HOST1's 2 workers; then a new Ray node
   starts on HOST2 (a machine back, or a replacement with the same address) and the job grows
   to 4 again, its new workers reaching the store from their own machine. The results are
   checked as test_ray_elastic checks them (identical parameters, every step committed once,
   parameters equal to a replay of the sizes each step ran at).

Prints "RAY_HOSTS OK ..." and exits 0 when every check passed; any failure raises.
"""

import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "ray"))
import test_ray_elastic as ejobs  # noqa: E402
import test_ray_executor as jobs  # noqa: E402

from horovod_cpp.ray import ElasticRayExecutor  # noqa: E402

#: After the loss, the survivors wait after committing this step until HOST2 is back.
HOLD_STEP = 20
STEPS = 40


class Hosts:
    """Ray worker nodes in the namespaces NS_PREFIX + host, at SUBNET_PREFIX.1N."""

    def __init__(self, ns_prefix, pfx, names, gcs, logdir):
        self.ns = {h: ns_prefix + h for h in names}
        self.ip = {h: f"{pfx}.1{i + 1}" for i, h in enumerate(names)}
        self.gcs = gcs
        self.logdir = logdir
        self.ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")

    def start(self, host, cpus=2, timeout=90):
        """`ray start --block` inside the host's namespace; returns once Ray lists the new
        node alive (a node lost on this address may still be listed alive for a while)."""
        old = self.node_ids(host)
        log = open(os.path.join(self.logdir, f"node_{host}_{time.time():.0f}.log"), "w")
        subprocess.Popen(["ip", "netns", "exec", self.ns[host], self.ray_bin, "start",
                          "--address", self.gcs, "--node-ip-address", self.ip[host],
                          "--num-cpus", str(cpus), "--disable-usage-stats", "--block"],
                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.node_ids(host) - old:
                return
            time.sleep(0.2)
        raise SystemExit(f"ray_hosts: the Ray node on {host} ({self.ip[host]}) did not join "
                         f"within {timeout} s (log in {log.name})")

    def node_ids(self, host):
        """Ids of the nodes at the host's address that Ray lists alive."""
        return {n["NodeID"] for n in ray.nodes()
                if n.get("Alive") and n["NodeManagerAddress"] == self.ip[host]}

    def pids(self, host):
        out = subprocess.run(["ip", "netns", "pids", self.ns[host]], capture_output=True,
                             text=True).stdout
        return [int(p) for p in out.split()]

    def kill(self, host):
        """SIGKILL to every process of the host: the machine is lost."""
        for pid in self.pids(host):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def kill_all(self):
        for host in self.ns:
            self.kill(host)


def fixed_job(hosts, h1, h2):
    """RayExecutor over the two hosts: places, store address and every collective."""
    places, store, results = jobs.run_two_by_two()
    names = [p[6] for p in places]
    assert sorted(set(names)) == sorted([hosts.ip[h1], hosts.ip[h2]]), names
    assert names[0] == names[1] != names[2] == names[3], names
    want = [(0, 4, 0, 2, 0, 2), (1, 4, 1, 2, 0, 2), (2, 4, 0, 2, 1, 2), (3, 4, 1, 2, 1, 2)]
    assert [p[:6] for p in places] == want, places
    assert [tuple(p) for p, _ in results] == want, results  # what hvd.* says in each worker
    assert store == ray.util.get_node_ip_address() and not store.startswith("127."), store
    return {"places": places, "store": store}


def elastic_job(hosts, h2, logdir):
    """ElasticRayExecutor: lose HOST2 at MARK_STEP, get it back, grow to 4 again."""
    marker = os.path.join(tempfile.mkdtemp(prefix="hvd_ray_hosts_", dir=logdir), "mark")
    ex = ElasticRayExecutor(ejobs.settings(elastic_timeout=90), min_workers=2, max_workers=4)
    out, generations = {}, []

    def driver():
        try:
            # A partial, not a lambda: a lambda here would carry this module's globals,
            # the test modules themselves, to the workers, which cannot import their conftest.
            out["results"] = ex.run(
                functools.partial(ejobs.elastic_job, marker, ejobs.MARK_STEP, STEPS, 0.2,
                                  hold_step=HOLD_STEP),
                on_membership=[lambda g, ws: generations.append((g, list(ws)))])
        except BaseException as e:  # reported below
            out["error"] = repr(e)

    def wait_for(what, cond, timeout):
        deadline = time.monotonic() + timeout
        while not cond() and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not cond():
            raise SystemExit(f"ray_hosts: {what} did not happen: {out} {generations}")

    ex.start()
    store = ex.store_address[0]
    thread = threading.Thread(target=driver, daemon=True)
    try:
        thread.start()
        wait_for(f"a worker reaching step {ejobs.MARK_STEP}", lambda: os.path.exists(marker),
                 150)
        lost_at = time.monotonic()
        hosts.kill(h2)
        wait_for("a generation of 2 workers after the loss",
                 lambda: any(len(ws) == 2 for _, ws in generations), 90)
        shrunk_s = time.monotonic() - lost_at
        hosts.start(h2)
        time.sleep(2 * ElasticRayExecutor.discovery_interval_s)  # the driver lists the node
        with open(marker + ".go", "w"):  # the survivors, held after HOLD_STEP, train on
            pass
        thread.join(timeout=180)
        if thread.is_alive():
            raise SystemExit("ray_hosts: ElasticRayExecutor.run() did not return")
    finally:
        ex.shutdown()
    if "error" in out:
        raise SystemExit(f"ray_hosts: the elastic job failed: {out['error']}")
    results = out["results"]
    sizes = ejobs.check_job(results, STEPS)
    first, last = generations[0][1], generations[-1][1]
    assert len(first) == 4 and len(last) == 4 and len(results) == 4, generations
    assert sizes[:ejobs.MARK_STEP] == [4] * ejobs.MARK_STEP and sizes[-1] == 4, sizes
    assert 2 in sizes[ejobs.MARK_STEP:], sizes
    # Two workers of the last generation started on the node that came back.
    seen_before = {w for _, ws in generations[:-1] for w in ws}
    assert len(set(last) - seen_before) == 2 and len(set(last) & set(first)) == 2, generations
    assert store == ray.util.get_node_ip_address() and not store.startswith("127."), store
    return {"sizes": sizes, "generations": generations, "store": store,
            "shrunk_s": round(shrunk_s, 2)}


def main(ns_prefix, pfx, h1, h2):
    logdir = tempfile.mkdtemp(prefix="hvd_ray_hosts_")
    # The head node: this process, at the bridge address, with no CPUs for workers. A new
    # one ("local"), whatever cluster the machine's ray_current_cluster file names; Ray
    # writes this one's address there, and a later ray.init() (the test/ray suite) would
    # try to join it: the file is put back as it was at the end.
    current = os.path.join(tempfile.gettempdir(), "ray", "ray_current_cluster")
    before = open(current).read() if os.path.exists(current) else None
    ray.init(address="local", num_cpus=0, _node_ip_address=f"{pfx}.1", include_dashboard=False)
    hosts = Hosts(ns_prefix, pfx, [h1, h2], ray.get_runtime_context().gcs_address, logdir)
    ray.cloudpickle.register_pickle_by_value(jobs)
    ray.cloudpickle.register_pickle_by_value(ejobs)
    try:
        hosts.start(h1)
        hosts.start(h2)
        t0 = time.monotonic()
        fixed = fixed_job(hosts, h1, h2)
        fixed_s = time.monotonic() - t0
        t0 = time.monotonic()
        elastic = elastic_job(hosts, h2, logdir)
        elastic_s = time.monotonic() - t0
    finally:
        hosts.kill_all()
        ray.shutdown()
        if before is None:
            if os.path.exists(current):
                os.unlink(current)
        else:
            with open(current, "w") as f:
                f.write(before)
    print(json.dumps({"fixed": fixed, "elastic": elastic}))
    print(f"RAY_HOSTS OK fixed job {fixed_s:.1f} s, elastic job {elastic_s:.1f} s (sizes "
          f"{sorted(set(elastic['sizes']), reverse=True)}, a generation of 2 formed "
          f"{elastic['shrunk_s']} s after the host was lost)")


if __name__ == "__main__":
    if len(sys.argv) != 5:
        raise SystemExit("usage: ray_hosts.py NS_PREFIX SUBNET_PREFIX HOST1 HOST2")
    main(*sys.argv[1:])
