"""horovodrun's flags that hvdrun took later: stall check, timeline cycles, autotune samples,
--binding-args, --tcp, --prefix-output-with-timestamp, --disable-cache and --config-file.

For each flag: the exact mpirun command, the Gloo worker's and the elastic worker's
environment; the config file (values, the command line winning, unknown and no-effect keys, a
missing file, no PyYAML); real launches under mpirun and Gloo that print what the workers got.

Run outside mpirun:  python -m pytest test/runner/test_horovodrun_flags.py
"""

import os
import re
import subprocess
import sys
import textwrap

import pytest

from horovod_cpp.runner import cli, elastic_driver, gloo_launch, launch

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "job_check.py")
ROOT_ARGS = ["--allow-run-as-root"] if os.geteuid() == 0 else []

#: flag(s) -> the variables they set for every worker.
SETTINGS = [
    (["--no-stall-check"], {"HOROVOD_STALL_CHECK_DISABLE": "1"}),
    (["--stall-check-warning-time-seconds", "7"], {"HOROVOD_STALL_CHECK_TIME_SECONDS": "7"}),
    (["--stall-check-shutdown-time-seconds", "12.5"],
     {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "12.5"}),
    (["--timeline-mark-cycles"], {"HOROVOD_TIMELINE_MARK_CYCLES": "1"}),
    (["--autotune-warmup-samples", "0"], {"HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "0"}),
    (["--autotune-steps-per-sample", "25"], {"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": "25"}),
    (["--tcp"], {"NCCL_IB_DISABLE": "1"}),
    (["--binding-args", "--bind-to core"], {}),
    (["-prefix-timestamp"], {}),
    (["--prefix-output-with-timestamp"], {}),
    (["--disable-cache"], {}),
]

#: flag(s) -> what replaces, in mpirun's command, the default '--bind-to none --map-by slot
#: --tag-output' between the hosts and the variables.
MPIRUN_PART = {
    "--binding-args": ["--bind-to", "core", "--tag-output"],
    "--tcp": ["--bind-to", "none", "--map-by", "slot", "--mca", "pml", "ob1", "--mca", "btl",
              "self,vader,tcp", "--tag-output"],
    "-prefix-timestamp": ["--bind-to", "none", "--map-by", "slot", "--tag-output",
                          "--timestamp-output"],
    "--prefix-output-with-timestamp": ["--bind-to", "none", "--map-by", "slot", "--tag-output",
                                       "--timestamp-output"],
}


def parse(flags, gloo=False):
    return cli.parse_args(["-np", "2", "-H", "localhost:2"] + (["--gloo"] if gloo else [])
                          + flags + ["python", "t.py"])


# ---- each flag: mpirun's command, the Gloo and the elastic worker's environment ----------
@pytest.mark.parametrize("flags,variables", SETTINGS, ids=[" ".join(f) for f, _ in SETTINGS])
def test_flag_in_the_mpirun_command(flags, variables):
    a = parse(flags)
    cmd = launch.build_command(a, [("localhost", 2)], {})
    middle = MPIRUN_PART.get(flags[0], ["--bind-to", "none", "--map-by", "slot", "--tag-output"])
    xs = [w for name, value in variables.items() for w in ("-x", f"{name}={value}")]
    assert cmd == (["mpirun", "-np", "2", "-H", "localhost:2"] + ROOT_ARGS + middle + xs
                   + ["python", "t.py"])


@pytest.mark.parametrize("flags,variables", SETTINGS, ids=[" ".join(f) for f, _ in SETTINGS])
def test_flag_in_the_gloo_and_elastic_worker_env(flags, variables):
    place = gloo_launch.place_workers([("localhost", 2)], 2)[1]
    base = gloo_launch.worker_env(place, "127.0.0.1", 1, "s", gloo_launch.job_settings(parse([])))
    env = gloo_launch.worker_env(place, "127.0.0.1", 1, "s",
                                 gloo_launch.job_settings(parse(flags, gloo=True)))
    assert {k: v for k, v in env.items() if base.get(k) != v} == variables
    # Elastic workers get the same job settings (elastic_driver: gloo_launch.job_settings).
    a = cli.parse_args(["--min-np", "1", "-np", "2"] + flags + ["python", "t.py"])
    rs = elastic_driver.rounds_settings(a, {})
    env = elastic_driver.worker_env("localhost:0", "localhost", "127.0.0.1", 1, "s",
                                    gloo_launch.job_settings(a), rs)
    for name, value in variables.items():
        assert env[name] == value


def test_all_flags_together_and_the_defaults():
    a = parse(["--no-stall-check", "--stall-check-warning-time-seconds", "7",
               "--stall-check-shutdown-time-seconds", "30", "--timeline-mark-cycles",
               "--autotune", "--autotune-warmup-samples", "2", "--autotune-steps-per-sample",
               "5", "--tcp", "--binding-args", "--map-by ppr:1:core --bind-to core",
               "--prefix-output-with-timestamp", "--disable-cache", "--mpi-args=--foo"])
    cmd = launch.build_command(a, [("localhost", 2)], {"HOROVOD_X": "1"})
    assert cmd == (["mpirun", "-np", "2", "-H", "localhost:2"] + ROOT_ARGS
                   + ["--map-by", "ppr:1:core", "--bind-to", "core", "--mca", "pml", "ob1",
                      "--mca", "btl", "self,vader,tcp", "--tag-output", "--timestamp-output",
                      "-x", "HOROVOD_AUTOTUNE=1", "-x", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES=2",
                      "-x", "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE=5",
                      "-x", "HOROVOD_STALL_CHECK_DISABLE=1",
                      "-x", "HOROVOD_STALL_CHECK_TIME_SECONDS=7",
                      "-x", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=30",
                      "-x", "HOROVOD_TIMELINE_MARK_CYCLES=1", "-x", "NCCL_IB_DISABLE=1",
                      "-x", "HOROVOD_X", "--foo", "python", "t.py"])
    # Without the flags nothing is set: the library's defaults apply.
    assert launch.settings_from_args(parse([])) == {}


@pytest.mark.parametrize("flags", [["--autotune-warmup-samples", "1001"],
                                   ["--autotune-steps-per-sample", "-1"],
                                   ["--stall-check-warning-time-seconds", "-3"],
                                   ["--stall-check-shutdown-time-seconds", "x"]])
def test_bad_values_are_refused(flags, capsys):
    with pytest.raises(SystemExit):
        parse(flags)
    assert flags[0] in capsys.readouterr().err


def test_help_lists_the_flags():
    text = cli.make_parser().format_help()
    for flag in ["--no-stall-check", "--stall-check-warning-time-seconds",
                 "--stall-check-shutdown-time-seconds", "--timeline-mark-cycles",
                 "--autotune-warmup-samples", "--autotune-steps-per-sample", "--binding-args",
                 "--tcp", "--prefix-output-with-timestamp", "--disable-cache", "--config-file"]:
        assert flag in text, flag
    assert "no effect" in text.split("--disable-cache", 2)[2][:200]


# ---- --config-file -------------------------------------------------------------------------
FULL_CONFIG = """\
controller: gloo
params:
  fusion_threshold_mb: 32
  cycle_time_ms: 2.5
  cache_capacity: 512
  hierarchical_allreduce: true
autotune:
  enabled: true
  log_file: /tmp/at.csv
  warmup_samples: 3
  steps_per_sample: 20
timeline:
  filename: /tmp/tl.json
  mark_cycles: true
stall_check:
  enabled: false
  warning_time_seconds: 9
  shutdown_time_seconds: 40
library_options:
  gloo_timeout_seconds: 45
logging:
  level: DEBUG
"""

FULL_SETTINGS = {
    "HOROVOD_FUSION_THRESHOLD": str(32 * 1024 * 1024), "HOROVOD_CYCLE_TIME": "2.5",
    "HOROVOD_CACHE_CAPACITY": "512", "HOROVOD_HIERARCHICAL_ALLREDUCE": "1",
    "HOROVOD_AUTOTUNE": "1", "HOROVOD_AUTOTUNE_LOG": "/tmp/at.csv",
    "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "3", "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": "20",
    "HOROVOD_STALL_CHECK_DISABLE": "1", "HOROVOD_STALL_CHECK_TIME_SECONDS": "9",
    "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "40", "HOROVOD_LOG_LEVEL": "debug",
    "HOROVOD_TIMELINE": "/tmp/tl.json", "HOROVOD_TIMELINE_MARK_CYCLES": "1",
}


def write_config(tmp_path, text):
    path = tmp_path / "horovod.yaml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_config_file_values(tmp_path):
    pytest.importorskip("yaml")
    a = cli.parse_args(["--config-file", write_config(tmp_path, FULL_CONFIG), "-np", "2", "x"])
    assert a.gloo is True
    assert launch.settings_from_args(a) == FULL_SETTINGS
    settings = gloo_launch.job_settings(a)
    assert settings["HOROVOD_GLOO_TIMEOUT_SECONDS"] == "45"
    cmd = launch.build_command(a, [("localhost", 2)], {})
    for name, value in FULL_SETTINGS.items():
        assert f"{name}={value}" in cmd, name


def test_command_line_wins_over_the_file(tmp_path):
    pytest.importorskip("yaml")
    path = write_config(tmp_path, FULL_CONFIG)
    a = cli.parse_args(["--mpi", "--fusion-threshold-mb", "8", "--log-level", "error",
                        "--stall-check-warning-time-seconds", "3", "--autotune-warmup-samples",
                        "0", "--gloo-timeout-seconds", "5", "--config-file", path, "x"])
    assert a.gloo is False
    s = launch.settings_from_args(a)
    assert s["HOROVOD_FUSION_THRESHOLD"] == str(8 * 1024 * 1024)
    assert s["HOROVOD_LOG_LEVEL"] == "error"
    assert s["HOROVOD_STALL_CHECK_TIME_SECONDS"] == "3"
    assert s["HOROVOD_AUTOTUNE_WARMUP_SAMPLES"] == "0"
    assert s["HOROVOD_CYCLE_TIME"] == "2.5"  # from the file: not on the command line
    a.gloo = True
    assert gloo_launch.job_settings(a)["HOROVOD_GLOO_TIMEOUT_SECONDS"] == "5"
    # An on/off flag given on the command line stays on whatever the file says.
    off = write_config(tmp_path, "autotune:\n  enabled: false\ntimeline:\n  mark_cycles: false\n"
                                 "stall_check:\n  enabled: true\n")
    a = cli.parse_args(["--autotune", "--timeline-mark-cycles", "--no-stall-check",
                        "--config-file", off, "x"])
    assert a.autotune and a.timeline_mark_cycles and a.no_stall_check
    a = cli.parse_args(["--config-file", off, "x"])
    assert not (a.autotune or a.timeline_mark_cycles or a.no_stall_check)


def test_sections_without_enabled_follow_horovod(tmp_path):
    pytest.importorskip("yaml")
    path = write_config(tmp_path, "autotune:\n  warmup_samples: 4\nstall_check:\n"
                                  "  warning_time_seconds: 2\n")
    a = cli.parse_args(["--config-file", path, "x"])
    assert a.autotune is False and a.no_stall_check is False  # Horovod's defaults
    assert launch.settings_from_args(a) == {"HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "4",
                                            "HOROVOD_STALL_CHECK_TIME_SECONDS": "2"}


@pytest.mark.parametrize("text,named", [
    ("params:\n  fusion_treshold_mb: 4\n", "unknown key params.fusion_treshold_mb"),
    ("tuning:\n  x: 1\n", "unknown section 'tuning'"),
    ("params:\n  cycle_time_ms: -1\n", "params.cycle_time_ms must be >= 0"),
    ("params:\n  hierarchical_allreduce: 1\n", "params.hierarchical_allreduce must be true or"),
    ("autotune:\n  steps_per_sample: 2000000\n", "autotune.steps_per_sample must be at most"),
    ("logging:\n  level: LOUD\n", "logging.level must be one of"),
    ("controller: nccl\n", "controller must be gloo or mpi"),
    ("- a\n- b\n", "expected a mapping"),
    ("params: [\n", "not valid YAML"),
])
def test_bad_config_is_refused_naming_the_key(tmp_path, capsys, text, named):
    pytest.importorskip("yaml")
    path = write_config(tmp_path, text)
    with pytest.raises(SystemExit) as e:
        cli.parse_args(["--config-file", path, "x"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert named in err and path in err, err


def test_keys_without_effect_are_named_in_a_warning(tmp_path, capsys):
    pytest.importorskip("yaml")
    path = write_config(tmp_path, """\
        params:
          hierarchical_allgather: true
          cycle_time_ms: 4
        autotune:
          bayes_opt_max_samples: 10
          gaussian_process_noise: 0.5
        library_options:
          mpi_threads_disable: true
          num_nccl_streams: 2
          ccl_bgt_affinity: 1
        logging:
          with_timestamp: false
        """)
    a = cli.parse_args(["--config-file", path, "x"])
    err = capsys.readouterr().err
    for key in ["params.hierarchical_allgather", "autotune.bayes_opt_max_samples",
                "autotune.gaussian_process_noise", "library_options.mpi_threads_disable",
                "library_options.num_nccl_streams", "library_options.ccl_bgt_affinity",
                "logging.with_timestamp"]:
        assert re.search(rf"hvdrun: warning: .*{re.escape(key)} has no effect", err), key
    assert launch.settings_from_args(a) == {"HOROVOD_CYCLE_TIME": "4"}


def test_missing_config_file(tmp_path, capsys):
    pytest.importorskip("yaml")
    path = str(tmp_path / "nope.yaml")
    with pytest.raises(SystemExit):
        cli.parse_args(["--config-file", path, "x"])
    assert f"--config-file {path}: cannot read it: No such file or directory" in \
        capsys.readouterr().err


def test_missing_pyyaml_is_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml raises ImportError
    path = tmp_path / "c.yaml"
    path.write_text("params: {}\n")
    with pytest.raises(SystemExit):
        cli.parse_args(["--config-file", str(path), "x"])
    assert "needs PyYAML" in capsys.readouterr().err
    cli.parse_args(["-np", "2", "x"])  # without --config-file PyYAML is not needed


# ---- real launches ------------------------------------------------------------------------
#: Prints, on every rank, the variables the flags set (or <unset>).
#: One write per line: mpirun tags each piece it reads from a worker's terminal.
PRINT_ENV = ("import os; r = os.environ.get('HOROVOD_RANK', os.environ.get("
             "'OMPI_COMM_WORLD_RANK')); os.write(1, ('ENV ' + r + ' ' + ' '.join(n + '=' + "
             "os.environ.get(n, '<unset>') for n in sys.argv[1:]) + '\\n').encode())")

NAMES = ["HOROVOD_STALL_CHECK_DISABLE", "HOROVOD_STALL_CHECK_TIME_SECONDS",
         "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "HOROVOD_TIMELINE_MARK_CYCLES",
         "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE",
         "NCCL_IB_DISABLE"]
FLAGS = ["--no-stall-check", "--stall-check-warning-time-seconds", "7",
         "--stall-check-shutdown-time-seconds", "50", "--timeline-mark-cycles",
         "--autotune-warmup-samples", "2", "--autotune-steps-per-sample", "5", "--tcp",
         "--disable-cache", "--prefix-output-with-timestamp"]
EXPECTED = ("HOROVOD_STALL_CHECK_DISABLE=1 HOROVOD_STALL_CHECK_TIME_SECONDS=7 "
            "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=50 HOROVOD_TIMELINE_MARK_CYCLES=1 "
            "HOROVOD_AUTOTUNE_WARMUP_SAMPLES=2 HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE=5 "
            "NCCL_IB_DISABLE=1")
#: mpirun --timestamp-output's prefix (C's ctime()), then the rank tag.
STAMP = r"[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}"


def hvdrun(args, timeout=180):
    env = {k: v for k, v in os.environ.items() if k not in NAMES and k != "HOROVOD_GLOO"}
    return subprocess.run([sys.executable, "-m", "horovod_cpp.runner"] + args,
                          capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.parametrize("mode", ["--mpi", "--gloo"])
def test_real_launch_passes_every_flag(mode):
    out = hvdrun(["-np", "2", mode] + FLAGS + [sys.executable, "-c", "import sys; " + PRINT_ENV]
                 + NAMES)
    assert out.returncode == 0, out.stdout + out.stderr
    for rank in (0, 1):
        assert re.search(rf"^{STAMP}\[1,{rank}\]<stdout>:ENV {rank} {EXPECTED}$", out.stdout,
                         re.M), out.stdout


@pytest.mark.parametrize("mode", ["--mpi", "--gloo"])
def test_real_job_runs_with_the_flags(mode):
    """The library takes the values (init fails on a bad one) and, under mpirun, the job's
    collectives run over Open MPI's TCP transport alone (--tcp)."""
    expect = [f"--expect-env={kv}" for kv in EXPECTED.split()]
    out = hvdrun(["-np", "2", mode, "--binding-args", "--bind-to none --map-by core"] + FLAGS
                 + [sys.executable, JOB, "--local-size", "2", "--cross-size", "1"] + expect)
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(rf"^{STAMP}\[1,0\]<stdout>:JOB_CHECK OK", out.stdout, re.M), out.stdout


def test_real_launch_from_a_config_file(tmp_path):
    pytest.importorskip("yaml")
    path = write_config(tmp_path, """\
        controller: gloo
        autotune:
          warmup_samples: 3
          steps_per_sample: 11
        timeline:
          mark_cycles: true
        stall_check:
          enabled: false
          warning_time_seconds: 8
          shutdown_time_seconds: 90
        library_options:
          num_nccl_streams: 2
        """)
    out = hvdrun(["-np", "2", "--config-file", path, "--stall-check-warning-time-seconds", "6",
                  "--no-tag-output", sys.executable, "-c", "import sys; " + PRINT_ENV]
                 + NAMES + ["HOROVOD_GLOO"])
    assert out.returncode == 0, out.stdout + out.stderr
    assert "library_options.num_nccl_streams has no effect" in out.stderr
    for rank in (0, 1):
        assert (f"ENV {rank} HOROVOD_STALL_CHECK_DISABLE=1 HOROVOD_STALL_CHECK_TIME_SECONDS=6 "
                "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=90 HOROVOD_TIMELINE_MARK_CYCLES=1 "
                "HOROVOD_AUTOTUNE_WARMUP_SAMPLES=3 HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE=11 "
                "NCCL_IB_DISABLE=<unset> HOROVOD_GLOO=1") in out.stdout, out.stdout


def test_gloo_timestamps_without_tags_and_in_files(tmp_path):
    out = hvdrun(["-np", "1", "--gloo", "--no-tag-output", "--prefix-output-with-timestamp",
                  sys.executable, "-c", "print('a'); import sys; print('b', file=sys.stderr)"])
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.fullmatch(rf"{STAMP}<stdout>:a\n", out.stdout), out.stdout
    assert re.search(rf"^{STAMP}<stderr>:b$", out.stderr, re.M), out.stderr
    out = hvdrun(["-np", "1", "--gloo", "--prefix-output-with-timestamp", "--output-filename",
                  str(tmp_path / "o"), sys.executable, "-c", "print('a')"])
    assert out.returncode == 0, out.stdout + out.stderr
    text = (tmp_path / "o" / "1" / "rank.0" / "stdout").read_text()
    assert re.fullmatch(rf"{STAMP}<stdout>:a\n", text), text
