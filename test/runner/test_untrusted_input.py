"""hvdrun and input it must not trust: host names from -H, a hostfile or Slurm, an ssh key
path with spaces, and the probe lines remote hosts answer the pre-launch check with.

Run outside mpirun:  python -m pytest test/runner
"""

import os
import random
import shlex
import shutil
import stat
import subprocess
import sys

import pytest

from horovod_cpp.runner import checks, cli, hosts, launch

HOSTILE = [
    ("-oProxyCommand=touch /tmp/pwned", "starts with '-'"),
    ("a,b", "holds a ','"),
    ("host;reboot", "only letters, digits"),
    ("host name", "only letters, digits"),
    ("$(id)", "only letters, digits"),
    (".hidden", "only letters, digits"),
    ("h" * 254, "longer than 253"),
    ("fe80::1", "only letters, digits"),
]


# ---- host names ---------------------------------------------------------------------------
def test_plain_host_names_are_kept():
    for name in ["node-01.cluster.local", "10.0.0.7", "k8s_worker-3", "localhost", "_gw"]:
        assert hosts.parse_hosts(f"{name}:2") == [(name, 2)]


@pytest.mark.parametrize("name,why", HOSTILE)
def test_hostile_names_in_dash_h(name, why):
    # The ',' case is split by -H itself into two entries, each valid: test it in a file.
    if "," in name:
        pytest.skip("-H splits at ','; see the hostfile and Slurm cases")
    with pytest.raises(hosts.HostError) as e:
        hosts.parse_hosts(f"good:1,{name}:2")
    assert f"host {name!r} is refused" in str(e.value) and why in str(e.value)


@pytest.mark.parametrize("name,why", [h for h in HOSTILE if " " not in h[0]])
def test_hostile_names_in_a_hostfile(tmp_path, name, why):
    f = tmp_path / "hostfile"
    f.write_text(f"good slots=2\n{name} slots=2\n")
    with pytest.raises(hosts.HostError) as e:
        hosts.parse_hostfile(str(f))
    assert str(e.value).startswith(f"{f}:2: host {name!r} is refused"), str(e.value)
    assert why in str(e.value)


@pytest.mark.parametrize("nodelist,bad", [("-oProxyCommand=x", "-oProxyCommand=x"),
                                          ("n[1-2],a;b", "a;b"), ("n[1-2],$(id)", "$(id)")])
def test_hostile_names_from_slurm(nodelist, bad):
    with pytest.raises(hosts.HostError) as e:
        hosts.slurm_hosts({"SLURM_JOB_NODELIST": nodelist})
    assert f"host {bad!r} is refused" in str(e.value)


def test_hvdrun_refuses_a_hostile_host_before_anything_runs(tmp_path):
    """The whole launcher, with --skip-checks (no probe): exit 2, the entry named, no mpirun."""
    f = tmp_path / "hostfile"
    f.write_text("-oProxyCommand=touch\\ /tmp/x slots=1\n")
    out = subprocess.run([sys.executable, "-m", "horovod_cpp.runner", "--skip-checks",
                          "--hostfile", str(f), "--dry-run", "true"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "is refused: it starts with '-'" in out.stderr
    assert out.stdout == ""


# ---- the ssh key path ---------------------------------------------------------------------
def rsh_args(cmd):
    return cmd[cmd.index("plm_rsh_args") + 1]


def test_identity_file_with_spaces_reaches_ssh_whole(tmp_path):
    key = tmp_path / "my keys" / "id ed25519"
    key.parent.mkdir()
    key.write_text("not a real key")
    path, folder = launch.rsh_safe_identity(str(key))
    try:
        assert folder is not None and not any(c.isspace() for c in path)
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
        assert os.path.realpath(path) == str(key)
        a = cli.parse_args(["-np", "2", "-H", "a:1,b:1", "-p", "2222", "-i", path, "cmd"])
        cmd = launch.build_command(a, hosts.parse_hosts(a.hosts), {})
        # Open MPI splits plm_rsh_args at spaces: every piece must be one whole argument.
        assert rsh_args(cmd).split(" ") == ["-p", "2222", "-i", path]
    finally:
        if folder:
            shutil.rmtree(folder)
    # A path without whitespace is passed as it is, with nothing to clean up.
    assert launch.rsh_safe_identity("/home/u/.ssh/id_rsa") == ("/home/u/.ssh/id_rsa", None)


def test_hvdrun_passes_a_spaced_key_path_and_cleans_up(tmp_path):
    key = tmp_path / "a b" / "key"
    key.parent.mkdir()
    key.write_text("x")
    out = subprocess.run([sys.executable, "-m", "horovod_cpp.runner", "--dry-run", "-H",
                          "h1:1", "-i", str(key), "true"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    args = shlex.split(out.stdout)
    value = args[args.index("plm_rsh_args") + 1]
    pieces = value.split(" ")
    assert pieces[0] == "-i" and len(pieces) == 2, value
    assert not os.path.exists(os.path.dirname(pieces[1]))  # removed when hvdrun ended


# ---- probe lines from remote hosts --------------------------------------------------------
def test_probe_line_parser_known_cases():
    tag = checks.PROBE_TAG
    assert checks.parse_probe_line(f"{tag} node1 0.1.0 /usr/lib/python3/x") == \
        ("node1", "0.1.0", "/usr/lib/python3/x")
    assert checks.parse_probe_line(f"{tag} node1 0.1.0 /path with spaces") == \
        ("node1", "0.1.0", "/path with spaces")
    for bad in ["", tag, f"{tag} ", f"{tag} node1", f"{tag} node1 0.1.0", f"{tag}  0.1.0 /x",
                f"{tag} node1  /x", f"{tag} node1 0.1.0 ", f"{tag}X node1 0.1.0 /x",
                f"NOT_{tag} a b c"]:
        assert checks.parse_probe_line(bad) is None, bad


def test_probe_line_parser_fuzzed():
    """Random short and garbage lines (seeded): a 3-tuple of non-empty strings or None."""
    rng = random.Random(40)
    tag = checks.PROBE_TAG
    alphabet = [" ", "  ", "a", "0.1", "/", "\t", "\x1b[2J", "\x00", "é", tag, "\n"]
    for _ in range(20000):
        line = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8)))
        if rng.random() < 0.5:
            line = tag + line
        got = checks.parse_probe_line(line)
        if got is not None:
            assert len(got) == 3 and all(isinstance(p, str) and p for p in got)
            assert line == " ".join((tag,) + got)


def test_a_garbage_probe_answer_is_a_clear_error(tmp_path, monkeypatch):
    """check_hosts with a remote host whose answer is a short line: CheckError naming it."""
    fake_mpirun = tmp_path / "mpirun"
    fake_mpirun.write_text(f"#!/bin/sh\necho '{checks.PROBE_TAG} short'\n")
    fake_mpirun.chmod(0o755)
    monkeypatch.setattr(checks, "is_local", lambda host: False)  # treat localhost as remote
    a = cli.parse_args(["-np", "1", "-H", "localhost:1", "cmd"])
    with pytest.raises(checks.CheckError) as e:
        checks.check_hosts(a, hosts.parse_hosts(a.hosts), mpirun=str(fake_mpirun))
    msg = str(e.value)
    assert "host 'localhost': the check's answer is malformed" in msg
    assert f"'{checks.PROBE_TAG} short'" in msg
