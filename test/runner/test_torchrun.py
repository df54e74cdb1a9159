"""Jobs started by torchrun (and by torch's plain env:// variables), run for real on this host:
every collective checked on every rank, the local and cross places from torchrun's node
layout or the host names, init_process_group before and after hvd.init(), a failing rank
ending the job, a restarted attempt, and the digits training to 95% with identical weights.

Run outside mpirun: python -m pytest test/runner/test_torchrun.py
"""

import os
import socket
import subprocess
import sys
import time

import pytest

from horovod_cpp import _torchrun

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WORKER = os.path.join(HERE, "torchrun_worker.py")

torch = pytest.importorskip("torch")
import horovod_cpp  # noqa: E402

needs_gloo = pytest.mark.skipif(not horovod_cpp.gloo_built(), reason="built without Gloo")

#: No job here may take longer.
LIMIT_S = 240


def _torchrun_cmd(*args):
    # Debian's torch 1.13 on Python 3.11 cannot parse torchrun's default "--redirects 0" /
    # "--tee 0" (Python 3.11's IntFlag no longer lists the zero member): name them.
    return [sys.executable, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1",
            "--monitor_interval", "0.5", *args]


def _env():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMI", "HOROVOD_")) and
           k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK")}
    env["HOROVOD_GLOO_TIMEOUT_SECONDS"] = "60"
    env["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"] = "60"
    return env


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _static():
    """torchrun's static rendezvous on a free port (its default, 29500, may be taken)."""
    return ["--master_port", str(_free_port())]


def _run(cmd, env=None):
    p = subprocess.run(cmd, env=env or _env(), capture_output=True, text=True, timeout=LIMIT_S,
                       cwd=ROOT)
    return p.returncode, p.stdout + p.stderr


def _oks(out_dir, attempt="0"):
    return sorted(int(f.split(".")[2]) for f in os.listdir(out_dir)
                  if f.startswith(f"ok.{attempt}."))


# ---- without a job: who is taken for a torchrun job, and the places ----------------------

TORCH_VARS = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "29500"}


def test_wanted_only_for_torchs_variables():
    assert _torchrun.wanted(TORCH_VARS)
    assert not _torchrun.wanted({})
    assert not _torchrun.wanted({k: v for k, v in TORCH_VARS.items() if k != "MASTER_PORT"})
    for other in ("OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMIX_RANK", "HOROVOD_RANK",
                  "HOROVOD_GLOO_RENDEZVOUS_ADDR", "HOROVOD_CPP_WORKER_ID"):
        assert not _torchrun.wanted({**TORCH_VARS, other: "2"}), other
    assert not _torchrun.wanted({**TORCH_VARS, "HOROVOD_CPP_TORCHRUN": "0"})


def test_place_from_torchruns_nodes():
    env = {**TORCH_VARS, "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
           "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2"}
    p = _torchrun._place(env)
    assert (p["HOROVOD_RANK"], p["HOROVOD_SIZE"], p["HOROVOD_LOCAL_RANK"],
            p["HOROVOD_LOCAL_SIZE"], p["HOROVOD_CROSS_RANK"], p["HOROVOD_CROSS_SIZE"]) == \
        ("3", "4", "1", "2", "1", "2")
    assert p["HOROVOD_HOSTNAME"].endswith("/node1")
    # Nodes that do not multiply up to the world: the host names decide (in adopt()).
    p = _torchrun._place({**env, "GROUP_WORLD_SIZE": "3", "GROUP_RANK": "2"})
    assert "HOROVOD_LOCAL_RANK" not in p


@pytest.mark.parametrize("name,value", [("RANK", "2"), ("RANK", "-1"), ("WORLD_SIZE", "0"),
                                        ("WORLD_SIZE", "two"), ("LOCAL_RANK", "2")])
def test_bad_values_name_the_variable(name, value):
    env = {**TORCH_VARS, "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0",
           "GROUP_WORLD_SIZE": "1", name: value}
    with pytest.raises(ValueError, match=f"{name}='{value}'"):
        _torchrun._place(env)


def test_wait_seconds():
    assert _torchrun._wait_seconds({}) == _torchrun._DEFAULT_WAIT_S
    assert _torchrun._wait_seconds({"HOROVOD_GLOO_TIMEOUT_SECONDS": "12.5"}) == 12.5
    for bad in ("soon", "0", "-3", "nan"):
        with pytest.raises(ValueError, match=f"HOROVOD_GLOO_TIMEOUT_SECONDS='{bad}'"):
            _torchrun._wait_seconds({"HOROVOD_GLOO_TIMEOUT_SECONDS": bad})


def test_layout_from_host_names():
    """Without torchrun's node variables the places come from the host names, numbered by
    elastic_rounds.places_for (what adopt() calls)."""
    from horovod_cpp.runner.elastic_rounds import places_for

    def layout(hosts):
        return [(p.local_rank, p.local_size, p.cross_rank, p.cross_size)
                for p in places_for(list(enumerate(hosts)))]

    assert layout(["a", "a", "b", "b"]) == \
        [(0, 2, 0, 2), (1, 2, 0, 2), (0, 2, 1, 2), (1, 2, 1, 2)]
    # Uneven hosts: local rank 1 exists on host a only.
    assert layout(["a", "b", "a"]) == [(0, 2, 0, 2), (0, 1, 1, 2), (1, 2, 0, 1)]
    assert layout(["x"]) == [(0, 1, 0, 1)]


# ---- real jobs --------------------------------------------------------------------------

@needs_gloo
@pytest.mark.parametrize("np_", [2, 3, 4])
def test_torchrun_agent_store(tmp_path, np_):
    """torchrun's default (static) rendezvous: the workers use the agent's store."""
    rc, out = _run(_torchrun_cmd(*_static(), "--nproc_per_node", str(np_), WORKER, "check",
                                 str(tmp_path)))
    assert rc == 0, out
    assert _oks(tmp_path) == list(range(np_)), out


@needs_gloo
@pytest.mark.parametrize("np_", [2, 3])
def test_torchrun_standalone(tmp_path, np_):
    """--standalone (c10d rendezvous): worker rank 0 serves the job's torch store."""
    rc, out = _run(_torchrun_cmd("--standalone", "--nproc_per_node", str(np_), WORKER, "check",
                                 str(tmp_path)))
    assert rc == 0, out
    assert _oks(tmp_path) == list(range(np_)), out


@needs_gloo
def test_torchrun_two_nodes(tmp_path):
    """Two torchrun agents (nodes) of 2 workers each: local and cross places from the nodes."""
    port = _free_port()
    procs = [subprocess.Popen(
        _torchrun_cmd("--nnodes", "2", "--node_rank", str(node), "--master_addr", "127.0.0.1",
                      "--master_port", str(port), "--nproc_per_node", "2", WORKER, "check",
                      str(tmp_path)),
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
        for node in (0, 1)]
    outs = [p.communicate(timeout=LIMIT_S)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert _oks(tmp_path) == [0, 1, 2, 3], outs


@needs_gloo
@pytest.mark.parametrize("np_", [2, 3])
def test_plain_env_variables(tmp_path, np_):
    """RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set by hand (as Kubeflow's PyTorchJob does),
    no LOCAL_*: the local places come from the host names."""
    _plain_env_job(tmp_path, np_, "check")


def _plain_env_job(tmp_path, np_, mode):
    """np_ workers started here with torch's four variables set by hand; all must get through."""
    port = str(_free_port())
    procs = []
    for r in range(np_):
        env = {**_env(), "RANK": str(r), "WORLD_SIZE": str(np_), "MASTER_ADDR": "localhost",
               "MASTER_PORT": port}
        procs.append(subprocess.Popen([sys.executable, WORKER, mode, str(tmp_path)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, cwd=ROOT))
    outs = [p.communicate(timeout=LIMIT_S)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * np_, outs
    assert _oks(tmp_path) == list(range(np_)), outs


@needs_gloo
@pytest.mark.parametrize("rdzv", ["static", "standalone"])
@pytest.mark.parametrize("mode", ["pg_before", "pg_after"])
def test_with_torch_process_group(tmp_path, mode, rdzv):
    """torch.distributed.init_process_group before or after hvd.init(): both work, the same sums."""
    extra = ["--standalone"] if rdzv == "standalone" else _static()
    rc, out = _run(_torchrun_cmd(*extra, "--nproc_per_node", "2", WORKER, mode, str(tmp_path)))
    assert rc == 0, out
    assert _oks(tmp_path) == [0, 1], out


@needs_gloo
@pytest.mark.parametrize("how", ["static", "standalone", "env"])
def test_torch_distributed_backend(tmp_path, how):
    """init_process_group("horovod_cpp") with no hvd.init() before: horovod_cpp starts from
    the group's own store; torch.distributed's collectives and torch's DDP run on it."""
    if how == "env":  # the four variables by hand: rank 0's init_process_group serves the store
        _plain_env_job(tmp_path, 2, "backend")
        return
    extra = ["--standalone"] if how == "standalone" else _static()
    rc, out = _run(_torchrun_cmd(*extra, "--nproc_per_node", "2", WORKER, "backend",
                                 str(tmp_path)))
    assert rc == 0, out
    assert _oks(tmp_path) == [0, 1], out


@needs_gloo
def test_a_failing_rank_ends_the_job(tmp_path):
    rc, out = _run(_torchrun_cmd(*_static(), "--nproc_per_node", "3", WORKER, "fail",
                                 str(tmp_path)))
    assert rc != 0, out
    assert "exitcode  : 3" in out or "exitcode: 3" in out.replace(" ", ""), out


@needs_gloo
def test_restarted_attempt_joins_afresh(tmp_path):
    """Rank 1 of the first attempt exits after init; torchrun restarts every worker, and the
    new attempt finds its own store (not the first attempt's address)."""
    rc, out = _run(_torchrun_cmd(*_static(), "--max_restarts", "1", "--nproc_per_node", "2",
                                 WORKER, "restart", str(tmp_path)))
    assert rc == 0, out
    assert _oks(tmp_path, "0") == [] and _oks(tmp_path, "1") == [0, 1], out


@needs_gloo
def test_a_node_joining_grows_the_job(tmp_path):
    """torchrun's elastic mode (--nnodes 1:2, c10d rendezvous): a second agent started while
    the job runs makes torchrun restart the workers as one job of 4; they resume from rank 0's
    step file and every allreduce is checked at the size of its round."""
    port = _free_port()
    cmd = _torchrun_cmd("--nnodes", "1:2", "--nproc_per_node", "2", "--rdzv_backend", "c10d",
                        "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", "grow",
                        "--max_restarts", "3", "--rdzv_conf", "last_call_timeout=1",
                        WORKER, "grow", str(tmp_path), "4")
    first = subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, cwd=ROOT)
    step_file = tmp_path / "step"
    deadline = time.monotonic() + 120
    while not (step_file.exists() and int(step_file.read_text() or 0) >= 5):
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()[0]
        time.sleep(0.2)
    second = subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, cwd=ROOT)
    outs = [p.communicate(timeout=LIMIT_S)[0] for p in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outs
    sizes = [int(line.split()[1]) for line in (tmp_path / "sizes").read_text().splitlines()]
    assert sizes[0] == 2 and sizes[-1] == 4 and sizes == sorted(sizes), sizes
    assert _oks(tmp_path) == [0, 1, 2, 3], outs


@needs_gloo
@pytest.mark.parametrize("how", ["optimizer", "ddp"])
def test_digits_training_under_torchrun(how):
    """The digits example under torchrun, with DistributedOptimizer (Horovod's way) and with
    DistributedDataParallel (DDP's way): 95% and identical weights on every rank."""
    extra = ["--ddp"] if how == "ddp" else []
    rc, out = _run(_torchrun_cmd(*_static(), "--nproc_per_node", "2",
                                 os.path.join(ROOT, "examples", "python", "train_digits.py"),
                                 "--epochs", "20", "--min-accuracy", "0.95", *extra))
    assert rc == 0, out
    assert "final test accuracy" in out, out


def test_a_stale_address_is_read_again_until_replaced():
    """A value left by an earlier round (its store gone) is not taken: the reader waits for
    rank 0 of this round to replace it; a value never replaced fails, naming the address."""
    import threading
    from datetime import timedelta

    from horovod_cpp.runner.rendezvous import StoreServer

    store = torch.distributed.TCPStore("127.0.0.1", _free_port(), 1, True,
                                       timedelta(seconds=10))
    dead = _free_port()  # nothing listens there
    store.set("k", f"{dead} oldsecret")
    with StoreServer("newsecret") as server:
        threading.Timer(0.5, lambda: store.set("k", f"{server.port} newsecret")).start()
        assert _torchrun.read_address(store, "k", "127.0.0.1", 20, 1, "here") == \
            (server.port, "newsecret")
        # A live store with another secret is stale too.
        store.set("k", f"{server.port} othersecret")
        with pytest.raises(RuntimeError, match=f"no rendezvous store at 127.0.0.1:{server.port}"):
            _torchrun.read_address(store, "k", "127.0.0.1", 0.5, 1, "here")
