"""The membership driver played by the elastic API tests (test_elastic_api.py and
test/tensorflow/test_tf_elastic_driver.py), following the elastic contract: a store served
here, workers started with the elastic environment (HOROVOD_ELASTIC=1, a worker id, no place
variables), their `assign/<id>/<n>` keys written here, their `ready/<id>/<n>` keys awaited."""

import os
import re
import signal
import subprocess
import sys
import time

from horovod_cpp.runner import gloo_launch, rendezvous

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_gloo_fault import Lines  # noqa: E402

OP_TIMEOUT_S = 5


def field(line, name):
    return int(re.search(rf"\b{name}=(\d+)", line).group(1))


class Driver:
    """The harness's side of the contract: starts workers with the elastic environment and
    writes their assignments."""

    def __init__(self):
        self.secret = gloo_launch.new_secret()
        self.store = rendezvous.StoreServer(self.secret).start()
        self.procs, self.lines, self.index = {}, Lines(), {}

    def assign(self, members, n_of, generation):
        """Places `members` (worker ids, in rank order, one per host) as generation
        `generation`; n_of[id] is the init count that assignment is for."""
        hosts = [(wid.split(":")[0], 1) for wid in members]
        for wid, place in zip(members, gloo_launch.place_workers(hosts, len(members))):
            self.store.set(f"assign/{wid}/{n_of[wid]}", gloo_launch.assignment(place, generation))

    def start(self, wid, argv):
        """Starts `argv` as elastic worker `wid` (its host: the part before ':')."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("OMPI_", "PMIX_"))}  # a harness itself under mpirun
        for k in ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
                  "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE"):
            env.pop(k, None)
        env.update(HOROVOD_GLOO="1", HOROVOD_CONTROLLER="gloo", HOROVOD_ELASTIC="1",
                   HOROVOD_ELASTIC_TIMEOUT="90",
                   HOROVOD_GLOO_RENDEZVOUS_ADDR="127.0.0.1",
                   HOROVOD_GLOO_RENDEZVOUS_PORT=str(self.store.port),
                   HOROVOD_CPP_RENDEZVOUS_SECRET=self.secret,
                   HOROVOD_CPP_WORKER_ID=wid, HOROVOD_HOSTNAME=wid.split(":")[0],
                   HOROVOD_CPP_GLOO_OP_TIMEOUT_SECONDS=str(OP_TIMEOUT_S))
        p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, start_new_session=True)
        self.procs[wid] = p
        self.index[wid] = len(self.index)
        self.lines.follow(self.index[wid], p.stdout)

    def wait_ready(self, wids, n, timeout):
        """Waits until every worker of `wids` SET its `ready/<id>/<n>` key."""
        deadline = time.monotonic() + timeout
        while not all(self.store.check(f"ready/{w}/{n}") for w in wids):
            assert time.monotonic() < deadline, \
                f"ready/<id>/{n} not set by all of {wids} within {timeout} s"
            time.sleep(0.05)

    def close(self):
        for p in self.procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        self.store.stop()
