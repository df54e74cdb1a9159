"""Tests of hvdrun: host parsing (real Slurm values), the mpirun command it builds, and real
launches on this host (values checked by every rank, exit status, errors before launch).

Run outside mpirun (hvdrun starts mpirun itself):
    python -m pytest test/runner
with horovod_cpp installed (pip install .) or on PYTHONPATH.
"""

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from horovod_cpp import runner
from horovod_cpp.runner import cli, hosts, launch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
JOB = os.path.join(HERE, "job_check.py")


# ---- host lists ---------------------------------------------------------------------------
def test_parse_hosts():
    assert hosts.parse_hosts("a:4,b:2") == [("a", 4), ("b", 2)]
    assert hosts.parse_hosts("node7") == [("node7", 1)]
    assert hosts.parse_hosts("10.0.0.1:3") == [("10.0.0.1", 3)]
    for bad, word in [("a:0", "at least 1"), ("a:x", "integer"), ("a:1,,b:1", "empty"),
                      ("a:1,a:2", "twice"), (":3", "no host")]:
        with pytest.raises(hosts.HostError, match=word):
            hosts.parse_hosts(bad)


def test_parse_hostfile(tmp_path):
    f = tmp_path / "hostfile"
    f.write_text("# workers\nworker-0 slots=4\nworker-1 slots=2 max_slots=8  # comment\n"
                 "\nworker-2\n")
    assert hosts.parse_hostfile(str(f)) == [("worker-0", 4), ("worker-1", 2), ("worker-2", 1)]
    f.write_text("worker-0 slot=4\n")
    with pytest.raises(hosts.HostError, match=r"hostfile:1: unknown field 'slot=4'"):
        hosts.parse_hostfile(str(f))
    with pytest.raises(hosts.HostError, match="cannot read"):
        hosts.parse_hostfile(str(tmp_path / "missing"))


def test_slurm_nodelist_expansion():
    assert hosts.expand_nodelist("node[01-04,07]") == ["node01", "node02", "node03", "node04",
                                                       "node07"]
    assert hosts.expand_nodelist("gpu-a[8-10],cpu7") == ["gpu-a8", "gpu-a9", "gpu-a10", "cpu7"]
    assert hosts.expand_nodelist("r[1-2]n[01-02]") == ["r1n01", "r1n02", "r2n01", "r2n02"]
    assert hosts.expand_nodelist("login1") == ["login1"]
    assert hosts.expand_nodelist("nid[0098-0101]") == ["nid0098", "nid0099", "nid0100",
                                                       "nid0101"]
    for bad in ["node[01-04", "node01]", "node[04-01]", "node[a-b]", "a,,b"]:
        with pytest.raises(hosts.HostError):
            hosts.expand_nodelist(bad)


def test_slurm_tasks_per_node_and_hosts():
    assert hosts.expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert hosts.expand_tasks_per_node("8") == [8]
    with pytest.raises(hosts.HostError, match="N\\(xM\\)"):
        hosts.expand_tasks_per_node("2x3")
    env = {"SLURM_JOB_NODELIST": "node[01-04,07]", "SLURM_TASKS_PER_NODE": "4(x4),2"}
    assert hosts.slurm_hosts(env) == [("node01", 4), ("node02", 4), ("node03", 4),
                                      ("node04", 4), ("node07", 2)]
    assert hosts.slurm_hosts({"SLURM_NODELIST": "a[1-2]"}) == [("a1", 1), ("a2", 1)]
    assert hosts.slurm_hosts({}) is None
    with pytest.raises(hosts.HostError, match="names 2 nodes but"):
        hosts.slurm_hosts({"SLURM_JOB_NODELIST": "a[1-2]", "SLURM_TASKS_PER_NODE": "2(x3)"})


def test_host_source_order(tmp_path):
    hf = tmp_path / "hf"
    hf.write_text("k8s-worker-0 slots=2\nk8s-worker-1 slots=2\n")
    slurm = {"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "2(x2)"}
    a = cli.parse_args(["-H", "x:1", "cmd"])
    assert runner.resolve_hosts(a, slurm) == ([("x", 1)], "-H")
    a = cli.parse_args(["cmd"])
    assert runner.resolve_hosts(a, slurm) == ([("n1", 2), ("n2", 2)], "Slurm")
    assert runner.resolve_hosts(a, {"OMPI_MCA_orte_default_hostfile": str(hf)})[0] == \
        [("k8s-worker-0", 2), ("k8s-worker-1", 2)]
    a = cli.parse_args(["-np", "3", "cmd"])
    assert runner.resolve_hosts(a, {}) == ([("localhost", 3)], "localhost")
    with pytest.raises(hosts.HostError, match="give -np"):
        runner.resolve_hosts(cli.parse_args(["cmd"]), {})


# ---- the mpirun command -------------------------------------------------------------------
def test_build_command_flags():
    a = cli.parse_args(["-np", "4", "-H", "a:2,b:2", "-p", "2222", "--network-interface", "eth1",
                        "--fusion-threshold-mb", "32", "--cycle-time-ms", "2.5",
                        "--cache-capacity", "0", "--hierarchical-allreduce", "--autotune",
                        "--autotune-log-file", "/tmp/at.csv", "--log-level", "DEBUG",
                        "--timeline-filename", "/tmp/tl.json", "--output-filename", "/tmp/out",
                        "--mpi-args", "--mca btl ^openib --report-bindings",
                        "python", "train.py", "--lr", "0.1"])
    env = {"HOROVOD_STALL_CHECK_TIME_SECONDS": "5", "NCCL_DEBUG": "INFO", "PYTHONPATH": "/p",
           "HOME": "/root", "SECRET_TOKEN": "x", "HOROVOD_FUSION_THRESHOLD": "1"}
    cmd = launch.build_command(a, hosts.parse_hosts(a.hosts), env)
    s = " ".join(cmd)
    assert cmd[:3] == ["mpirun", "-np", "4"]
    assert cmd[-4:] == ["python", "train.py", "--lr", "0.1"]
    assert "-H a:2,b:2" in s and "--bind-to none" in s and "--map-by slot" in s
    assert cmd[cmd.index("plm_rsh_args") + 1] == "-p 2222"
    assert "--mca btl_tcp_if_include eth1 --mca oob_tcp_if_include eth1" in s
    assert "--output-filename /tmp/out" in s
    for kv in ["HOROVOD_FUSION_THRESHOLD=33554432", "HOROVOD_CYCLE_TIME=2.5",
               "HOROVOD_CACHE_CAPACITY=0", "HOROVOD_HIERARCHICAL_ALLREDUCE=1",
               "HOROVOD_AUTOTUNE=1", "HOROVOD_AUTOTUNE_LOG=/tmp/at.csv",
               "HOROVOD_LOG_LEVEL=debug", "HOROVOD_TIMELINE=/tmp/tl.json"]:
        assert f"-x {kv}" in s, kv
    # Inherited variables are forwarded by name; a flag overrides the inherited value.
    for name in ["HOROVOD_STALL_CHECK_TIME_SECONDS", "NCCL_DEBUG", "PYTHONPATH"]:
        assert f"-x {name} " in s + " ", name
    assert "-x HOROVOD_FUSION_THRESHOLD " not in s + " "
    assert "SECRET_TOKEN" not in s and "HOME" not in s
    assert "--oversubscribe" not in s
    assert "--tag-output" in s
    a2 = cli.parse_args(["-np", "2", "--no-tag-output", "x"])
    assert "--tag-output" not in launch.build_command(a2, [("localhost", 2)], {})
    assert s.index("--report-bindings") < s.index("python train.py")


def test_cli_errors():
    with pytest.raises(SystemExit):
        cli.parse_args(["-np", "2"])  # no command
    with pytest.raises(SystemExit):
        cli.parse_args(["-np", "0", "x"])


# ---- real launches on this host -----------------------------------------------------------
def hvdrun_cmd():
    """The installed console script when it is there (pip install .), else the module."""
    script = os.path.join(os.path.dirname(sys.executable), "hvdrun")
    if os.path.exists(script):
        return [script]
    if os.environ.get("HVDRUN_REQUIRE_SCRIPT") == "1":
        pytest.fail(f"the hvdrun console script is not installed next to {sys.executable}")
    return [sys.executable, "-m", "horovod_cpp.runner"]


def run_hvdrun(args, env=None, timeout=180):
    e = dict(os.environ)
    e.update(env or {})
    e.setdefault("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "60")
    return subprocess.run(hvdrun_cmd() + args, capture_output=True, text=True, timeout=timeout,
                          env=e)


def test_console_script_installed_when_required():
    if os.environ.get("HVDRUN_REQUIRE_SCRIPT") != "1":
        pytest.skip("HVDRUN_REQUIRE_SCRIPT is not 1 (running from a build tree)")
    assert os.path.exists(os.path.join(os.path.dirname(sys.executable), "hvdrun"))


def test_check_build():
    out = run_hvdrun(["--check-build"])
    assert out.returncode == 0, out.stderr
    for line in ["Available Frameworks:", "[X] numpy", "[X] MPI",
                 "[X] shared memory (CPU, ranks of one host)", "MPI launcher: mpirun"]:
        assert line in out.stdout, out.stdout
    import horovod_cpp
    assert out.stdout.startswith(f"horovod_cpp v{horovod_cpp.__version__}:")
    assert ("[X] NCCL" in out.stdout) == horovod_cpp.nccl_built()


@pytest.mark.parametrize("np_", [2, 3])
def test_launch_checks_values(np_):
    out = run_hvdrun(["-np", str(np_), "--verbose", "--fusion-threshold-mb", "2",
                      sys.executable, JOB, "--local-size", str(np_), "--cross-size", "1",
                      "--expect-env", "HOROVOD_FUSION_THRESHOLD=2097152"])
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"JOB_CHECK OK size={np_}" in out.stdout
    # --verbose prints the exact mpirun command.
    assert "hvdrun: mpirun -np %d -H localhost:%d" % (np_, np_) in out.stderr


def test_launch_from_slurm_variables():
    """Inside an allocation the hosts come from Slurm's variables (here: this host, 2 tasks)."""
    out = run_hvdrun(["--verbose", sys.executable, JOB, "--local-size", "2", "--cross-size",
                      "1"], env={"SLURM_JOB_NODELIST": "localhost", "SLURM_TASKS_PER_NODE": "2"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "(hosts from Slurm)" in out.stderr and "JOB_CHECK OK size=2" in out.stdout


def test_sbatch_script_runs(tmp_path):
    """docs/examples/hvdrun.sbatch, run as sbatch would on a one-node allocation."""
    script = os.path.join(ROOT, "docs", "examples", "hvdrun.sbatch")
    env = dict(os.environ, SLURM_JOB_NODELIST="localhost", SLURM_TASKS_PER_NODE="2",
               SLURM_JOB_ID="1", SLURM_SUBMIT_DIR=ROOT, HVDRUN=" ".join(hvdrun_cmd()),
               TRAIN=f"{sys.executable} {JOB} --local-size 2 --cross-size 1",
               HOROVOD_STALL_SHUTDOWN_TIME_SECONDS="60")
    out = subprocess.run(["bash", script], capture_output=True, text=True, timeout=180, env=env,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "JOB_CHECK OK size=2" in out.stdout


def test_exit_status_is_the_jobs():
    out = run_hvdrun(["-np", "2", sys.executable, JOB, "--local-size", "2", "--cross-size", "1",
                      "--exit-code-on-rank", "1:7"])
    assert "JOB_CHECK OK" in out.stdout
    assert out.returncode == 7, out.stdout + out.stderr


def test_failing_check_fails_every_rank():
    out = run_hvdrun(["-np", "2", sys.executable, JOB, "--local-size", "2", "--cross-size", "1",
                      "--expect-env", "HOROVOD_NOT_SET=1"])
    assert out.returncode == 1
    assert "JOB_CHECK FAIL rank 0: $HOROVOD_NOT_SET is None" in out.stdout
    assert "JOB_CHECK FAIL rank 1: $HOROVOD_NOT_SET is None" in out.stdout


def test_too_many_processes_is_refused():
    out = run_hvdrun(["-np", "3", "-H", "localhost:2", "true"])
    assert out.returncode == 2
    assert "-np 3 is more than the 2 slots" in out.stderr and "--oversubscribe" in out.stderr
    out = run_hvdrun(["-np", "3", "-H", "localhost:2", "--oversubscribe", "true"])
    assert out.returncode == 0, out.stderr


def test_unknown_host_is_named_before_launch():
    out = run_hvdrun(["-np", "2", "-H", "localhost:1,no-such-host.invalid:1", "true"])
    assert out.returncode == 3
    assert "host 'no-such-host.invalid': its name does not resolve" in out.stderr


def test_unreachable_host_is_named(tmp_path):
    """A host on which nothing can be started (an rsh agent that fails as a dead ssh would) is
    named in the error, and the job does not run. 192.0.2.1 is TEST-NET-1: an address that is
    never local; the fake agent sends nothing anywhere."""
    agent = tmp_path / "agent"
    agent.write_text("#!/bin/sh\necho 'ssh: connect to host: No route to host' >&2\nexit 255\n")
    agent.chmod(0o755)
    marker = tmp_path / "ran"
    out = run_hvdrun(["-np", "2", "-H", "localhost:1,192.0.2.1:1", "--start-timeout", "60",
                      "--mpi-args", f"--mca plm_rsh_agent {agent}", "touch", str(marker)])
    assert out.returncode == 3, out.stdout + out.stderr
    assert "pre-launch check failed" in out.stderr, out.stderr
    assert "host '192.0.2.1': could not start" in out.stderr, out.stderr
    assert not marker.exists()


@pytest.mark.parametrize("np_", [2, 3])
def test_autotune_end_to_end(tmp_path, np_):
    """--autotune searches while a job runs (results stay right), rank 0 writes the CSV log,
    and the search finishes with a best row."""
    log = tmp_path / "autotune.csv"
    out = run_hvdrun(["-np", str(np_), "--autotune", "--autotune-log-file", str(log),
                      "--log-level", "info", sys.executable, os.path.join(HERE, "autotune_job.py"),
                      "300"],
                     env={"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": "3",
                          "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "1",
                          "HOROVOD_CPP_AUTOTUNE_SAMPLES_PER_TRIAL": "2"}, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "AUTOTUNE_JOB OK 300 steps, 0 wrong elements" in out.stdout
    lines = log.read_text().splitlines()
    assert lines[0] == "trial,fusion_threshold_mb,cycle_time_ms,score_mb_per_s,best"
    assert lines[1].startswith("0,64,1,")
    thresholds = {ln.split(",")[1] for ln in lines[1:-1]}
    assert thresholds == {"0", "1", "4", "16", "32", "64", "128"}, lines
    assert len(lines) == 1 + 10 + 1 and lines[-1].startswith("best,"), lines
    assert all(float(ln.split(",")[3]) > 0 for ln in lines[1:])
    assert "autotune: done after 10 trials" in out.stdout + out.stderr
