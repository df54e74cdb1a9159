"""hvdrun's elastic flags and host discovery, without a job: the checks of flag combinations,
the discovery output format, the discovery script's failures, the workers' environment.

    python -m pytest test/runner/test_elastic_cli.py
"""

import os
import subprocess
import sys

import pytest

from horovod_cpp.runner import cli, discovery, elastic_driver, hosts

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_hvdrun import hvdrun_cmd  # noqa: E402


def test_elastic_mode_is_any_of_the_three_flags():
    assert not cli.is_elastic(cli.parse_args(["-np", "2", "x"]))
    for extra in (["--min-np", "1"], ["--max-np", "4"], ["--host-discovery-script", "d.sh"]):
        assert cli.is_elastic(cli.parse_args(["-np", "2"] + extra + ["x"]))
    a = cli.parse_args(["--host-discovery-script", "d.sh", "--blacklist-cooldown-range", "5",
                        "60", "--reset-limit", "3", "--slots", "4", "--elastic-timeout", "30",
                        "x"])
    assert (a.cooldown, a.reset_limit, a.slots, a.elastic_timeout) == ([5.0, 60.0], 3, 4, 30.0)


@pytest.mark.parametrize("argv, message", [
    (["--min-np", "3", "--max-np", "2"], "--min-np 3 is more than --max-np 2"),
    (["-np", "1", "--min-np", "2"], "-np 1 is less than --min-np 2"),
    (["-np", "5", "--max-np", "4"], "-np 5 is more than --max-np 4"),
    (["--min-np", "1", "--mpi", "-np", "2"], "run on the Gloo controller: --mpi"),
    (["--host-discovery-script", "d", "-H", "a:2"], "either --host-discovery-script or -H"),
    (["-np", "2", "--reset-limit", "1"], "--reset-limit applies to elastic jobs only"),
    (["-np", "2", "--blacklist-cooldown-range", "1", "2"], "applies to elastic jobs only"),
    (["--min-np", "1", "-np", "2", "--reset-limit", "-1"], "--reset-limit must be >= 0"),
    (["--min-np", "1", "-np", "2", "--blacklist-cooldown-range", "9", "2"],
     "MIN 9 is more than MAX 2"),
    (["--max-np", "2"], "an elastic job needs hosts"),
])
def test_bad_combinations_are_refused_with_a_clear_error(argv, message):
    a = cli.make_parser().parse_args(argv + ["x"])
    assert message in cli.elastic_problem(a)


def test_bad_combination_exits_2_before_starting_anything():
    out = subprocess.run(hvdrun_cmd() + ["--min-np", "3", "--max-np", "2", "true"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--min-np 3 is more than --max-np 2" in out.stderr


def test_discovery_output_format():
    text = "# hosts\nnode-a:4\n\nnode-b   # default slots\n10.0.0.3:2\n"
    assert discovery.parse_discovery(text, 2) == [("node-a", 4), ("node-b", 2),
                                                  ("10.0.0.3", 2)]
    for bad, word in [("a:x\n", "must be an integer"), ("a:0\n", "at least 1"),
                      ("a\na:2\n", "listed twice"), ("-oProxy:1\n", "starts with '-'")]:
        with pytest.raises(hosts.HostError, match=word):
            discovery.parse_discovery(bad, 1)


def test_discovery_script_errors_keep_the_last_list(tmp_path):
    script = tmp_path / "d.sh"
    state = tmp_path / "state"
    script.write_text(f"#!/bin/sh\n[ -e {state} ] && {{ echo broken >&2; exit 4; }}\n"
                      "echo a:2\necho b\n")
    script.chmod(0o755)
    assert discovery.run_script(str(script), 3) == ([("a", 2), ("b", 3)], None)
    d = discovery.ScriptDiscovery(str(script), 3, interval_s=0.05, log=lambda m: None).start()
    try:
        assert d.latest() == ([("a", 2), ("b", 3)], None)
        state.write_text("x")
        d._poll()
        assert d.latest() == ([("a", 2), ("b", 3)],
                              f"--host-discovery-script {script} exited with status 4: broken")
    finally:
        d.stop()
    assert discovery.run_script(str(tmp_path / "missing"), 1)[1].endswith("cannot run it: "
                                                                          "No such file or "
                                                                          "directory")
    slow = tmp_path / "slow.sh"
    slow.write_text("#!/bin/sh\nexec sleep 5\n")
    slow.chmod(0o755)
    assert "ran longer than 0.2 s" in discovery.run_script(str(slow), 1, timeout_s=0.2)[1]


def test_worker_environment_has_no_place_and_the_elastic_variables():
    a = cli.parse_args(["--min-np", "2", "-np", "3", "--elastic-timeout", "100", "x"])
    rs = elastic_driver.rounds_settings(a, {"HOROVOD_CPP_GLOO_OP_TIMEOUT_SECONDS": "3"})
    assert (rs.np, rs.min_np, rs.max_np, rs.ready_timeout) == (3, 2, None, 13.0)
    assert rs.start_timeout == 30.0  # --start-timeout's default: a new worker's first init
    env = elastic_driver.worker_env("h:1.2", "h", "10.0.0.1", 1234, "s" * 64, {"A": "b"}, rs)
    assert env == {"A": "b", "HOROVOD_GLOO_RENDEZVOUS_ADDR": "10.0.0.1",
                   "HOROVOD_GLOO_RENDEZVOUS_PORT": "1234",
                   "HOROVOD_CPP_RENDEZVOUS_SECRET": "s" * 64, "HOROVOD_HOSTNAME": "h",
                   "HOROVOD_CPP_WORKER_ID": "h:1.2", "HOROVOD_ELASTIC": "1",
                   "HOROVOD_ELASTIC_TIMEOUT": "203"}  # 100 + 13 + 30 + 60
    assert not set(elastic_driver.PLACE_VARS) & set(env)
