"""RayExecutor(num_hosts=2, num_workers_per_host=2) on two Ray nodes: one host per node, local
and cross ranks as hvdrun --gloo gives them, every collective right (multinode_driver.py)."""

import json
import os
import subprocess
import sys

from conftest import skip_without_ray

skip_without_ray()

HERE = os.path.dirname(os.path.abspath(__file__))


def test_two_nodes_two_workers_each():
    proc = subprocess.run([sys.executable, os.path.join(HERE, "multinode_driver.py")],
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    places = out["places"]
    hosts = [p[6] for p in places]
    # Two Ray nodes sharing this machine's address: two hosts named ip~<node id>.
    assert hosts[0] == hosts[1] != hosts[2] == hosts[3] and "~" in hosts[0]
    want = [(0, 4, 0, 2, 0, 2), (1, 4, 1, 2, 0, 2), (2, 4, 0, 2, 1, 2), (3, 4, 1, 2, 1, 2)]
    assert [tuple(p[:6]) for p in places] == want
    assert [tuple(s) for s in out["seen"]] == want  # what hvd.* says in each worker
    assert out["store"] == "127.0.0.1"  # every node is on the driver's machine
