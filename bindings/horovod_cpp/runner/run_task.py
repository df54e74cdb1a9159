"""The worker of `horovod_cpp.run` (run_func.py): `python -m horovod_cpp.runner.run_task ADDR
PORT`. Fetches the pickled function from the driver's store, calls it, and leaves a record
under its rank: the value, or the exception's type, message and traceback. Exits 1 when the
call raised, so that the launcher ends the job as it would for any failed rank.
"""

import os
import pickle
import sys
import traceback

from . import run_func
from .store_client import Client


def _rank_and_size():
    """The rank and size after the call: the library's when it is still initialized (an
    elastic job's final membership), else the launcher's variables."""
    try:
        import horovod_cpp
        if horovod_cpp.is_initialized():
            return horovod_cpp.rank(), horovod_cpp.size()
    except Exception:  # the call may have shut the library down, or failed to load it
        pass
    for rank_name, size_name in (("HOROVOD_RANK", "HOROVOD_SIZE"),
                                 ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                                 ("PMI_RANK", "PMI_SIZE")):
        if rank_name in os.environ and size_name in os.environ:
            return int(os.environ[rank_name]), int(os.environ[size_name])
    raise RuntimeError("horovod_cpp.run: this worker knows neither its rank nor its size")


def _failure(exc):
    try:
        exception = pickle.dumps(exc)
    except Exception:  # an exception holding an unpicklable value travels as text only
        exception = None
    return {"ok": False, "type": type(exc).__name__, "message": str(exc),
            "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
            "exception": exception}


def main(argv):
    address, port = argv[1], int(argv[2])
    secret = os.environ.pop(run_func.ENV_SECRET)
    client = Client(address, port, secret, timeout_s=run_func.FETCH_TIMEOUT_MS / 1000 + 5)
    status, payload = client.get(run_func.PAYLOAD_KEY, run_func.FETCH_TIMEOUT_MS)
    if status != "OK":
        raise RuntimeError(f"horovod_cpp.run: the function was not received from "
                           f"{address}:{port} ({status})")
    func, args, kwargs = pickle.loads(payload)
    try:
        record = {"ok": True, "value": func(*args, **kwargs)}
    except BaseException as e:  # SystemExit and KeyboardInterrupt are the call's outcome too
        traceback.print_exc()
        record = _failure(e)
    rank, size = _rank_and_size()
    record["size"] = size
    try:
        blob = run_func.dumps(record)
        if len(blob) > run_func.rendezvous.MAX_VALUE:
            raise ValueError(f"it takes {len(blob)} bytes pickled, more than the "
                             f"{run_func.rendezvous.MAX_VALUE} a store value holds")
    except Exception as e:
        record = _failure(TypeError(f"the value of rank {rank} cannot travel back: {e}"))
        record["size"] = size
        print(f"horovod_cpp.run: {record['message']}", file=sys.stderr)
        blob = run_func.dumps(record)
    client.set(run_func.result_key(rank), blob)
    client.close()
    return 0 if record["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
