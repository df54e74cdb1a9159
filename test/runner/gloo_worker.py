"""A tiny worker for the `hvdrun --gloo` tests: it speaks the store's protocol (store_client)
instead of loading the library, so the launcher is tested on its own.

Each worker: reads the contract's variables, GETs its assignment `assign/<worker_id>/0` and
checks it against them, publishes its rank and place under `g0/`, then reads every other
rank's and checks that the ranks 0..size-1 each appear once, that ranks of one host agree on
the local size, and that a shared ADD counter reaches size. It prints one line
`GLOO_ENV {json}` (the test checks it against the placement hvdrun should compute) and, on
rank 0, `GLOO_WORKER OK size=N` when every rank passed. Then the fault options apply.
"""

import argparse
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import store_client  # noqa: E402  (beside this file; the workers run it by path)

FIELDS = ("rank", "size", "local_rank", "local_size", "cross_rank", "cross_size")
VARS = ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
        "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE")


def fail(msg):
    print(f"GLOO_WORKER FAIL {msg}", flush=True)
    sys.exit(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--exit-code-on-rank", default="", help="R:C: rank R exits C after the checks")
    p.add_argument("--sleep", type=float, default=0.0, help="seconds to sleep after the checks")
    p.add_argument("--pid-dir", help="each worker writes its pid to PID_DIR/rank.N")
    p.add_argument("--ignore-term", action="store_true", help="ignore SIGTERM (needs SIGKILL)")
    a = p.parse_args()
    env = os.environ
    place = {f: int(env[v]) for f, v in zip(FIELDS, VARS)}
    rank, size = place["rank"], place["size"]
    if a.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if a.pid_dir:
        with open(os.path.join(a.pid_dir, f"rank.{rank}"), "w") as f:
            f.write(str(os.getpid()))
    c = store_client.Client.from_env()
    status, value = c.get(f"assign/{env['HOROVOD_CPP_WORKER_ID']}/0", 10000)
    want = ",".join(str(place[f]) for f in FIELDS) + ",0"
    if status != "OK" or value.decode() != want:
        fail(f"rank {rank}: assignment {status} {value!r}, expected {want!r}")
    mine = dict(place, host=env["HOROVOD_HOSTNAME"], worker_id=env["HOROVOD_CPP_WORKER_ID"],
                gloo=env.get("HOROVOD_GLOO"), controller=env.get("HOROVOD_CONTROLLER"),
                secret_len=len(env["HOROVOD_CPP_RENDEZVOUS_SECRET"]), cwd=os.getcwd(),
                extra={k: env.get(k) for k in ("HOROVOD_FUSION_THRESHOLD",
                                               "HOROVOD_GLOO_TIMEOUT_SECONDS",
                                               "HOROVOD_GLOO_IFACE", "HVD_TEST_FORWARDED")})
    print("GLOO_ENV " + json.dumps(mine, sort_keys=True), flush=True)
    if c.set(f"g0/place/{rank}", json.dumps(mine)) != "OK":
        fail(f"rank {rank}: SET refused")
    status, total = c.add("g0/count", 1)
    if status != "OK" or not 1 <= total <= size:
        fail(f"rank {rank}: ADD gave {status} {total!r}")
    others = []
    for r in range(size):
        status, value = c.get(f"g0/place/{r}", 20000)
        if status != "OK":
            fail(f"rank {rank}: rank {r}'s place: {status}")
        others.append(json.loads(value))
    if [o["rank"] for o in others] != list(range(size)):
        fail(f"rank {rank}: ranks {[o['rank'] for o in others]}")
    for o in others:
        if o["host"] == mine["host"] and o["local_size"] != mine["local_size"]:
            fail(f"rank {rank}: rank {o['rank']} on {o['host']} has local size {o['local_size']}")
    c.set(f"g0/done/{rank}", "1")
    if rank == 0:
        for r in range(size):
            if c.get(f"g0/done/{r}", 20000)[0] != "OK":
                fail(f"rank 0: rank {r} did not finish")
        status, total = c.add("g0/count", 0)
        if total != size:
            fail(f"rank 0: the counter is {total}, expected {size}")
        print(f"GLOO_WORKER OK size={size}", flush=True)
    c.close()
    if a.exit_code_on_rank:
        r, code = (int(x) for x in a.exit_code_on_rank.split(":"))
        if r == rank:
            sys.exit(code)
    time.sleep(a.sleep)


if __name__ == "__main__":
    main()
