"""Tests of `hvdrun --gloo` with tiny worker programs (gloo_worker.py speaks the store's
protocol; the library is not involved): placement, each worker's variables and assignment
key, tagged output, exit status, the first failure ending the job, signals, and remote
workers through an rsh agent.

    python -m pytest test/runner/test_gloo_launch.py
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from horovod_cpp import runner
from horovod_cpp.runner import cli, gloo_launch, hosts

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "gloo_worker.py")
sys.path.insert(0, HERE)
from test_hvdrun import hvdrun_cmd  # noqa: E402


def hvdrun(args, env=None, timeout=120):
    e = dict(os.environ)
    e.pop("HOROVOD_GLOO", None)
    e.update(env or {})
    return subprocess.run(hvdrun_cmd() + args, capture_output=True, text=True, timeout=timeout,
                          env=e)


def envs_of(stdout):
    """rank -> the GLOO_ENV dict each worker printed, read through the [1,rank] tags."""
    out = {}
    for line in stdout.splitlines():
        tag, sep, rest = line.partition("<stdout>:")
        if sep and rest.startswith("GLOO_ENV "):
            d = json.loads(rest[len("GLOO_ENV "):])
            assert tag == f"[1,{d['rank']}]", line
            out[d["rank"]] = d
    return out


def pids_in(folder, n, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = [os.path.join(folder, f"rank.{r}") for r in range(n)]
        if all(os.path.exists(f) and open(f).read() for f in files):
            return [int(open(f).read()) for f in files]
        time.sleep(0.05)
    raise AssertionError(f"the workers did not all start: {os.listdir(folder)}")


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes: /proc says so.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ", 1)[1][0] != "Z"


def wait_gone(pids, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


# ---- pure parts ---------------------------------------------------------------------------
def test_placement_follows_horovod():
    P = gloo_launch.Place
    got = gloo_launch.place_workers(hosts.parse_hosts("a:2,b:2"), 4)
    assert got == [P(0, 4, 0, 2, 0, 2, "a"), P(1, 4, 1, 2, 0, 2, "a"),
                   P(2, 4, 0, 2, 1, 2, "b"), P(3, 4, 1, 2, 1, 2, "b")]
    # Fewer workers than slots: the first hosts fill up first.
    got = gloo_launch.place_workers(hosts.parse_hosts("a:2,b:2,c:2"), 3)
    assert [(p.host, p.local_rank, p.local_size) for p in got] == [("a", 0, 2), ("a", 1, 2),
                                                                   ("b", 0, 1)]
    # Uneven hosts: local rank 1 exists on a only, so its cross group is {a}.
    got = gloo_launch.place_workers(hosts.parse_hosts("a:2,b:1"), 3)
    assert [(p.cross_rank, p.cross_size) for p in got] == [(0, 2), (0, 1), (1, 2)]
    got = gloo_launch.place_workers(hosts.parse_hosts("a:1,b:3"), 4)
    assert [(p.cross_rank, p.cross_size) for p in got] == [(0, 2), (1, 2), (0, 1), (0, 1)]
    # Oversubscribed: further rounds add one worker per host.
    got = gloo_launch.place_workers(hosts.parse_hosts("a:1,b:1"), 5)
    assert [p.host for p in got] == ["a", "a", "a", "b", "b"]
    assert gloo_launch.worker_id(got[4]) == "b:1"
    assert gloo_launch.assignment(got[3]) == "3,5,0,2,1,2,0"


def test_fixed_job_answers_every_generation():
    places = gloo_launch.place_workers(hosts.parse_hosts("a:2,b:1"), 3)
    resolve = gloo_launch.fixed_assignments(places)
    assert resolve("assign/b:0/0") == "2,3,0,1,1,2,0"
    assert resolve("assign/a:1/7") == "1,3,1,2,0,1,7"
    for key in ["assign/c:0/1", "assign/a:0/x", "assign/a:0/", "assign/a:0/1234567890",
                "other/a:0/1", "assign/a:0", "g0/assign/a:0/1"]:
        assert resolve(key) is None, key


def test_worker_env_and_secret():
    a = cli.parse_args(["--gloo", "-np", "2", "--gloo-timeout-seconds", "7",
                        "--network-interface", "eth1", "--cycle-time-ms", "3", "x"])
    settings = gloo_launch.job_settings(a)
    place = gloo_launch.place_workers([("h1", 2)], 2)[1]
    secret = gloo_launch.new_secret()
    assert len(secret) == 64 and int(secret, 16) >= 0 and secret != gloo_launch.new_secret()
    env = gloo_launch.worker_env(place, "10.0.0.1", 4242, secret, settings)
    assert env == {
        "HOROVOD_GLOO": "1", "HOROVOD_CONTROLLER": "gloo", "HOROVOD_CYCLE_TIME": "3",
        "HOROVOD_GLOO_TIMEOUT_SECONDS": "7", "HOROVOD_GLOO_IFACE": "eth1",
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": "10.0.0.1", "HOROVOD_GLOO_RENDEZVOUS_PORT": "4242",
        "HOROVOD_CPP_RENDEZVOUS_SECRET": secret, "HOROVOD_RANK": "1", "HOROVOD_SIZE": "2",
        "HOROVOD_LOCAL_RANK": "1", "HOROVOD_LOCAL_SIZE": "2", "HOROVOD_CROSS_RANK": "0",
        "HOROVOD_CROSS_SIZE": "1", "HOROVOD_HOSTNAME": "h1", "HOROVOD_CPP_WORKER_ID": "h1:1"}
    # A subnet selects the store's address only; it is not an interface name for Gloo.
    a = cli.parse_args(["--gloo", "--network-interface", "10.77.0.0/24", "x"])
    assert "HOROVOD_GLOO_IFACE" not in gloo_launch.job_settings(a)


def test_store_address_choice():
    local = lambda h: h == "localhost"  # noqa: E731
    assert gloo_launch.store_host([("localhost", 2)], None, local) == "127.0.0.1"
    assert gloo_launch.store_host([("localhost", 1), ("b", 1)], "lo", local) == "127.0.0.1"
    assert gloo_launch.store_host([("localhost", 1), ("b", 1)], "127.0.0.0/8", local) == \
        "127.0.0.1"
    with pytest.raises(ValueError, match="no address of this host"):
        gloo_launch.store_host([("b", 1)], "198.51.100.0/24", local)


def test_remote_command_quotes_everything():
    a = cli.parse_args(["--gloo", "-p", "2222", "-i", "/k/id", "x"])
    argv = gloo_launch.remote_command(a, "h2", {"A": "x y", "B": "$(boom)"},
                                      ["python", "it's.py"], "/w d")
    assert argv[:7] == ["ssh", "-o", "BatchMode=yes", "-p", "2222", "-i", "/k/id"]
    assert argv[7] == "h2" and len(argv) == 9
    assert "env 'A=x y' 'B=$(boom)' python 'it'\"'\"'s.py' </dev/null &" in argv[8]
    assert argv[8].startswith("cd '/w d' >/dev/null 2>&1;")
    a = cli.parse_args(["--gloo", "--rsh-agent", "/my/agent --flag", "x"])
    assert gloo_launch.rsh_prefix(a, "h") == ["/my/agent", "--flag", "h"]


def test_gloo_is_selected_by_flag_or_env():
    assert runner.use_gloo(cli.parse_args(["--gloo", "x"]), {})
    assert runner.use_gloo(cli.parse_args(["x"]), {"HOROVOD_GLOO": "1"})
    assert not runner.use_gloo(cli.parse_args(["x"]), {"HOROVOD_GLOO": "0"})
    assert not runner.use_gloo(cli.parse_args(["x"]), {})
    assert not runner.use_gloo(cli.parse_args(["--mpi", "x"]), {"HOROVOD_GLOO": "1"})
    with pytest.raises(SystemExit):
        cli.parse_args(["--mpi", "--gloo", "x"])


def test_dry_run_shows_the_workers_without_the_secret():
    out = hvdrun(["--gloo", "-np", "2", "--dry-run", "train", "--x"])
    assert out.returncode == 0, out.stderr
    assert "rendezvous store on 127.0.0.1" in out.stdout
    assert "rank 0 on localhost (local 0/2, cross 0/1): train --x" in out.stdout
    assert "rank 1 on localhost (local 1/2, cross 0/1): train --x" in out.stdout
    assert "mpirun" not in out.stdout
    out = hvdrun(["--dry-run", "-np", "2", "--rsh-agent", "/bin/agent", "--network-interface",
                  "lo", "-H", "localhost:1,192.0.2.1:1", "train"], env={"HOROVOD_GLOO": "1"})
    assert out.returncode == 0, out.stderr
    remote = [ln for ln in out.stdout.splitlines() if ln.startswith("rank 1 on 192.0.2.1")][0]
    assert "/bin/agent 192.0.2.1" in remote and "HOROVOD_CPP_RENDEZVOUS_SECRET=<secret>" in remote


# ---- real jobs on this host ---------------------------------------------------------------
@pytest.mark.parametrize("np_", [2, 3, 4])
def test_every_worker_sees_its_place(np_, tmp_path):
    out = hvdrun(["--gloo", "-np", str(np_), "--fusion-threshold-mb", "2",
                  "--gloo-timeout-seconds", "9", sys.executable, WORKER],
                 env={"HVD_TEST_FORWARDED": "yes"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"[1,0]<stdout>:GLOO_WORKER OK size={np_}" in out.stdout
    envs = envs_of(out.stdout)
    assert sorted(envs) == list(range(np_))
    for place in gloo_launch.place_workers([("localhost", np_)], np_):
        e = envs[place.rank]
        assert [e[f] for f in ("size", "local_rank", "local_size", "cross_rank",
                               "cross_size")] == list(place[1:6])
        assert e["host"] == "localhost" and e["worker_id"] == f"localhost:{place.rank}"
        assert e["gloo"] == "1" and e["controller"] == "gloo" and e["secret_len"] == 64
        assert e["extra"] == {"HOROVOD_FUSION_THRESHOLD": "2097152",
                              "HOROVOD_GLOO_TIMEOUT_SECONDS": "9", "HOROVOD_GLOO_IFACE": None,
                              "HVD_TEST_FORWARDED": "yes"}


def test_env_variable_selects_gloo_and_no_tag_output():
    out = hvdrun(["-np", "2", "--no-tag-output", sys.executable, WORKER],
                 env={"HOROVOD_GLOO": "1"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "GLOO_WORKER OK size=2" in out.stdout.splitlines()
    assert "<stdout>" not in out.stdout


def test_output_filename_writes_each_ranks_files(tmp_path):
    out = hvdrun(["--gloo", "-np", "2", "--output-filename", str(tmp_path), sys.executable,
                  WORKER])
    assert out.returncode == 0, out.stdout + out.stderr
    assert "GLOO_WORKER OK size=2" in (tmp_path / "1" / "rank.0" / "stdout").read_text()
    assert '"rank": 1' in (tmp_path / "1" / "rank.1" / "stdout").read_text()


def test_first_failure_ends_the_job(tmp_path):
    t0 = time.monotonic()
    out = hvdrun(["--gloo", "-np", "3", sys.executable, WORKER, "--exit-code-on-rank", "1:3",
                  "--sleep", "120", "--pid-dir", str(tmp_path)])
    took = time.monotonic() - t0
    assert out.returncode == 3, out.stdout + out.stderr
    assert "hvdrun: rank 1 on host localhost exited with status 3" in out.stderr, out.stderr
    assert "stopping the other 2 running workers" in out.stderr
    assert took < 30, took  # the others (sleeping 120 s) were terminated
    assert wait_gone(pids_in(tmp_path, 3), 5) == []


def test_worker_ignoring_sigterm_is_killed(tmp_path):
    out = hvdrun(["--gloo", "-np", "2", sys.executable, WORKER, "--exit-code-on-rank", "0:4",
                  "--sleep", "120", "--ignore-term", "--pid-dir", str(tmp_path)])
    assert out.returncode == 4, out.stdout + out.stderr
    assert "rank 0 on host localhost exited with status 4" in out.stderr
    assert wait_gone(pids_in(tmp_path, 2), 5) == []


def test_worker_killed_by_a_signal_is_named(tmp_path):
    p = subprocess.Popen(hvdrun_cmd() + ["--gloo", "-np", "3", sys.executable, WORKER,
                                         "--sleep", "120", "--pid-dir", str(tmp_path)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids = pids_in(tmp_path, 3)
    os.kill(pids[2], signal.SIGKILL)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 128 + 9, out + err
    assert "rank 2 on host localhost was killed by SIGKILL" in err, err
    assert wait_gone(pids, 5) == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_hvdrun_ends_every_worker(tmp_path, signum):
    p = subprocess.Popen(hvdrun_cmd() + ["--gloo", "-np", "3", sys.executable, WORKER,
                                         "--sleep", "120", "--pid-dir", str(tmp_path)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids = pids_in(tmp_path, 3)
    t0 = time.monotonic()
    p.send_signal(signum)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 128 + signum, out + err
    assert time.monotonic() - t0 < 15
    assert f"got {signal.Signals(signum).name}; stopping 3 workers" in err, err
    assert wait_gone(pids, 5) == []


def test_workers_do_not_outlive_a_killed_hvdrun(tmp_path):
    """Even SIGKILL, which hvdrun cannot catch, ends its workers (parent-death signal)."""
    p = subprocess.Popen(hvdrun_cmd() + ["--gloo", "-np", "2", sys.executable, WORKER,
                                         "--sleep", "120", "--pid-dir", str(tmp_path)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pids = pids_in(tmp_path, 2)
    p.kill()
    p.wait()
    assert wait_gone(pids, 10) == []


def test_runs_from_a_source_checkout_without_the_native_module():
    """scripts/hvdrun under a python that cannot import horovod_cpp (isolated mode, no
    PYTHONPATH): the store and the launcher are plain Python."""
    script = os.path.join(os.path.dirname(os.path.dirname(HERE)), "scripts", "hvdrun")
    bare = "/usr/bin/python3"
    if subprocess.run([bare, "-I", "-c", "import horovod_cpp"],
                      capture_output=True).returncode == 0:
        pytest.skip(f"{bare} has horovod_cpp installed")
    out = subprocess.run([bare, "-I", script, "--gloo", "-np", "2", sys.executable, WORKER],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[1,0]<stdout>:GLOO_WORKER OK size=2" in out.stdout


def test_missing_program_is_reported():
    out = hvdrun(["--gloo", "-np", "2", "/no/such/program"])
    assert out.returncode == 127
    assert "cannot start '/no/such/program'" in out.stderr


# ---- remote workers, through an rsh agent that runs them here -------------------------------
def fake_agent(tmp_path):
    """An rsh agent called as ssh is, running the command on this machine in a session of its
    own and an empty environment, as on another host: hvdrun's signals to the agent do not
    reach the worker (only the ssh channel's end does), and only what hvdrun passes arrives."""
    agent = tmp_path / "agent"
    agent.write_text("#!/bin/sh\nwhile [ \"${1#-}\" != \"$1\" ]; do shift; done\n"
                     "echo \"$1\" >> \"$(dirname \"$0\")/hosts\"; shift\n"
                     "exec env -i setsid -w sh -c \"$*\"\n")
    agent.chmod(0o755)
    return str(agent)


def test_remote_workers_through_the_agent(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    out = hvdrun(["--gloo", "-np", "4", "-H", "localhost:2,192.0.2.1:2", "--rsh-agent",
                  fake_agent(tmp_path), "--network-interface", "lo", "--verbose",
                  sys.executable, WORKER, "--pid-dir", str(pids)],
                 env={"HVD_TEST_FORWARDED": "no", "PYTHONPATH": os.environ.get("PYTHONPATH",
                                                                              "")})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "GLOO_WORKER OK size=4" in out.stdout
    envs = envs_of(out.stdout)
    assert [(envs[r]["host"], envs[r]["cross_rank"]) for r in range(4)] == \
        [("localhost", 0), ("localhost", 0), ("192.0.2.1", 1), ("192.0.2.1", 1)]
    assert envs[3]["worker_id"] == "192.0.2.1:1" and envs[3]["cwd"] == os.getcwd()
    # Only the listed variables travel to a remote worker: HVD_TEST_FORWARDED does not.
    assert envs[2]["extra"]["HVD_TEST_FORWARDED"] is None
    assert envs[0]["extra"]["HVD_TEST_FORWARDED"] == "no"
    assert envs[2]["extra"]["HOROVOD_GLOO_IFACE"] == "lo"
    # The pre-launch probe and both remote workers went through the agent.
    assert (tmp_path / "hosts").read_text().split() == ["192.0.2.1"] * 3
    assert "host 192.0.2.1" in out.stderr and "has horovod_cpp" in out.stderr


def test_remote_worker_failure_and_channel_close(tmp_path):
    """Rank 3 (remote) exits 5; the other remote worker, out of reach of hvdrun's signals,
    ends when its ssh channel closes."""
    pids = tmp_path / "pids"
    pids.mkdir()
    out = hvdrun(["--gloo", "-np", "4", "-H", "localhost:2,192.0.2.1:2", "--rsh-agent",
                  fake_agent(tmp_path), "--network-interface", "lo", "--skip-checks",
                  sys.executable, WORKER, "--exit-code-on-rank", "3:5", "--sleep", "120",
                  "--pid-dir", str(pids)])
    assert out.returncode == 5, out.stdout + out.stderr
    assert "rank 3 on host 192.0.2.1 exited with status 5" in out.stderr
    assert wait_gone(pids_in(pids, 4), 10) == []


def test_check_build_shows_gloo_as_built():
    import horovod_cpp
    out = hvdrun(["--check-build"])
    assert out.returncode == 0, out.stderr
    box = "[X]" if horovod_cpp.gloo_built() else "[ ]"
    assert f"    {box} Gloo" in out.stdout.split("Available Controllers:")[1], out.stdout
