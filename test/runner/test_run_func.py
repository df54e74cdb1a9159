"""`horovod_cpp.run` (Horovod's horovod.run): real jobs on this host under mpirun and under the
Gloo controller, every rank's value checked against what each rank computes independently;
a rank that raises surfaces in the caller with its rank, message and traceback; arguments
that cannot work fail before any launch.

Run outside mpirun (run() starts the job itself): python -m pytest test/runner
"""

import os
import signal
import sys
import warnings

import numpy as np
import pytest

import horovod_cpp
from horovod_cpp import runner
from horovod_cpp.runner import run_func

HERE = os.path.dirname(os.path.abspath(__file__))

import run_func_jobs as jobs  # noqa: E402  (test/runner is on sys.path under pytest)


#: No test here may wait longer than this for its job (run() itself has no timeout).
TEST_LIMIT_S = 240


class JobTimeLimit(Exception):
    """Not an OSError (as TimeoutError is), which the Gloo launch would read as a failed start."""


def _too_long(signum, frame):
    raise JobTimeLimit(f"horovod_cpp.run did not return within {TEST_LIMIT_S} s")


@pytest.fixture(autouse=True)
def workers_import_jobs(monkeypatch):
    """The workers import run_func_jobs by name, so this folder goes on their PYTHONPATH. A
    collective some rank never reaches ends the job (the library's stall shutdown), and the
    test fails instead of hanging if the job still does not end."""
    path = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", HERE + (os.pathsep + path if path else ""))
    monkeypatch.setenv("HOROVOD_GLOO_TIMEOUT_SECONDS", "60")
    monkeypatch.setenv("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "60")
    previous = signal.signal(signal.SIGALRM, _too_long)
    signal.alarm(TEST_LIMIT_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def expected_sum(size, n):
    return sum(jobs.seeded(r, n) for r in range(size))


@pytest.mark.parametrize("np_", [2, 3])
@pytest.mark.parametrize("gloo", [False, True], ids=["mpi", "gloo"])
def test_values_in_rank_order(np_, gloo):
    results = horovod_cpp.run(jobs.allreduce_job, args=(500,), kwargs={"scale": 2.0},
                              num_proc=np_, use_gloo=gloo, use_mpi=not gloo)
    assert len(results) == np_
    for rank, (r, size, local_rank, total) in enumerate(results):
        assert (r, size, local_rank) == (rank, np_, rank)
        np.testing.assert_array_equal(total, expected_sum(np_, 500) * 2.0)


def test_elastic_settings():
    """min/max_num_proc make it an elastic job (hvdrun's driver, Gloo); the values come back
    by the ranks the library gives, the job's size from rank 0's record."""
    results = horovod_cpp.run(jobs.allreduce_job, args=(100,), num_proc=2, min_num_proc=1,
                              max_num_proc=2, hosts="localhost:2")
    assert [r[:3] for r in results] == [(0, 2, 0), (1, 2, 1)]
    for r in results:
        np.testing.assert_array_equal(r[3], expected_sum(2, 100))


def test_allgather_with_rows_by_rank():
    results = runner.run(jobs.allgather_job, num_proc=3)
    want = np.concatenate([np.full((r + 1, 3), r, np.int64) for r in range(3)])
    assert len(results) == 3
    for got in results:
        np.testing.assert_array_equal(got, want)


def test_without_init_the_launcher_gives_the_rank():
    assert horovod_cpp.run(jobs.no_init, args=("x",), num_proc=2) == ["x", "x"]


@pytest.mark.parametrize("gloo", [False, True], ids=["mpi", "gloo"])
def test_a_rank_that_raises_names_itself(gloo):
    with pytest.raises(RuntimeError) as info:
        horovod_cpp.run(jobs.fail_on, args=(1,), num_proc=2, use_gloo=gloo)
    text = str(info.value)
    assert "rank 1 raised ValueError: bad batch on rank 1" in text
    assert "fail_on" in text  # the worker's traceback
    assert isinstance(info.value.__cause__, ValueError)
    assert str(info.value.__cause__) == "bad batch on rank 1"
    # The caller goes on: the next job works.
    assert horovod_cpp.run(jobs.no_init, args=(7,), num_proc=2, use_gloo=gloo) == [7, 7]


def test_closures_and_lambdas_travel_with_cloudpickle():
    pytest.importorskip("cloudpickle")
    base = 10
    assert horovod_cpp.run(lambda k: base + k, args=(5,), num_proc=2) == [15, 15]


def test_without_cloudpickle_functions_travel_by_name(monkeypatch):
    """Plain pickle sends a function by reference: an importable one works, a lambda or a
    function of __main__ is refused before any launch, with the reason."""
    monkeypatch.setitem(sys.modules, "cloudpickle", None)  # import cloudpickle now fails
    assert horovod_cpp.run(jobs.no_init, args=(3,), num_proc=2) == [3, 3]
    with pytest.raises(ValueError, match="cannot pickle.*install cloudpickle"):
        horovod_cpp.run(lambda: 1, num_proc=2)

    def main_function():
        return 1
    main_function.__module__ = "__main__"
    with pytest.raises(ValueError, match="defined in __main__.*cloudpickle"):
        horovod_cpp.run(main_function, num_proc=2)


def test_deprecated_np_name():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert horovod_cpp.run(jobs.no_init, args=(1,), np=2) == [1, 1]
    assert any(issubclass(w.category, DeprecationWarning) and "num_proc" in str(w.message)
               for w in seen)


@pytest.mark.parametrize("kwargs, word", [
    (dict(hosts="localhost:2", hostfile="/nonexistent"), "hosts or hostfile"),
    (dict(use_gloo=True, use_mpi=True), "use_gloo and use_mpi"),
    (dict(num_proc=0), "num_proc"),
    (dict(start_timeout="soon"), "hvdrun refused the settings"),
])
def test_conflicting_arguments_fail_before_launch(kwargs, word):
    with pytest.raises(ValueError, match=word):
        horovod_cpp.run(jobs.no_init, args=(1,), **kwargs)


def test_command_line_of_the_settings():
    argv = run_func._argv(4, "a:2,b:2", None, dict(
        start_timeout=20, ssh_port=2222, network_interface="eth0", use_gloo=True,
        min_num_proc=2, max_num_proc=4, cooldown_range=(5, 30), verbose=True))
    assert argv == ["-np", "4", "-H", "a:2,b:2", "--start-timeout", "20", "-p", "2222",
                    "--network-interface", "eth0", "--min-np", "2", "--max-np", "4",
                    "--blacklist-cooldown-range", "5", "30", "--verbose", "--gloo"]


MAIN_SCRIPT = '''
import horovod_cpp

def train(epochs):
    import numpy as np
    horovod_cpp.init()
    w = horovod_cpp.allreduce(np.full(3, float(horovod_cpp.rank() + epochs)), name="w")
    return w.tolist()

if __name__ == "__main__":
    try:
        print("RESULT", horovod_cpp.run(train, args=(2,), num_proc=2))
    except ValueError as e:
        print("REFUSED", e)
'''


def test_a_function_of_main(tmp_path):
    """A script's own function (as in Horovod's examples: horovod.run(train_fn, ...)) travels
    with cloudpickle; without it the call is refused with the reason, before any launch."""
    import subprocess
    script = tmp_path / "script.py"
    script.write_text(MAIN_SCRIPT)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=300, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr
    try:
        import cloudpickle  # noqa: F401
    except ImportError:
        assert "REFUSED" in out.stdout and "cloudpickle" in out.stdout, out.stdout
        return
    # Average of rank + 2 over ranks 0 and 1: 2.5 on both.
    assert "RESULT [[2.5, 2.5, 2.5], [2.5, 2.5, 2.5]]" in out.stdout, out.stdout + out.stderr


def test_verbose_lines_hide_the_secrets():
    """hvdrun --verbose prints each remote worker's command: neither the store's secret nor
    run()'s (which reaches remote workers in their environment) may show."""
    from horovod_cpp.runner import gloo_launch
    place = gloo_launch.place_workers([("h2", 1)], 1)[0]
    cmd = ["agent", "h2", "env HOROVOD_CPP_RENDEZVOUS_SECRET=aa11 "
           f"{run_func.ENV_SECRET}=bb22 python -m horovod_cpp.runner.run_task 10.0.0.1 5"]
    line = gloo_launch.describe(place, cmd, "aa11")
    assert "aa11" not in line and "bb22" not in line, line
    assert f"{run_func.ENV_SECRET}=<secret>" in line
