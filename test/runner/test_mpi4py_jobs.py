"""horovod_cpp beside mpi4py, as Horovod programs use it (mpi4py_worker.py): init(comm=...)
with MPI_COMM_WORLD, a Split communicator and a rank list; ProcessSet(communicator) in
init(process_sets=...) and add_process_set(); mpi4py's collectives beside the library's; and
every job ending without hvd.shutdown() while mpi4py finalizes MPI at exit (the library must
be down by then: before the fix, Open MPI aborted with "MPI_Iallgather() called after
MPI_FINALIZE"). Each job runs under mpirun with 2, 3 and 4 ranks and must exit 0 on every rank.

Run outside mpirun: python -m pytest test/runner/test_mpi4py_jobs.py
"""

import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "mpi4py_worker.py")

pytest.importorskip("mpi4py")
if shutil.which("mpirun") is None:
    pytest.skip("no mpirun", allow_module_level=True)

MODES = ["world", "split", "ranks", "sets", "rc_false", "pending", "outside"]


def _env():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_COMM_WORLD", "PMI"))}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", HOROVOD_STALL_SHUTDOWN_TIME_SECONDS="60")
    return env


@pytest.mark.parametrize("np_", [2, 3, 4])
@pytest.mark.parametrize("mode", MODES)
def test_mpi4py_job(mode, np_):
    p = subprocess.run(["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(np_),
                        sys.executable, WORKER, mode],
                       env=_env(), capture_output=True, text=True, timeout=180)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    assert f"MPI4PY_JOB OK {mode}" in p.stdout, out[-4000:]
    assert "MPI_FINALIZE" not in out, out[-4000:]


def test_a_communicator_under_the_gloo_controller_is_refused():
    """hvdrun --gloo starts workers without mpirun: init(comm=...) names the reason."""
    code = ("import horovod_cpp as hvd\n"
            "from mpi4py import MPI\n"
            "try:\n"
            "    hvd.init(comm=MPI.COMM_WORLD)\n"
            "except Exception as e:\n"
            "    print('REFUSED', type(e).__name__, e, flush=True)\n")
    p = subprocess.run([sys.executable, "-m", "horovod_cpp.runner", "--gloo", "-np", "2",
                        sys.executable, "-c", code],
                       env=_env(), capture_output=True, text=True, timeout=180)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    assert out.count("REFUSED") == 2, out[-4000:]
    assert "Gloo controller" in out, out[-4000:]
