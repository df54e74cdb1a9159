"""The process behind each RayExecutor worker: a Ray actor that runs the user's functions.

The actor is plain (no horovod_cpp import until the user's function does one): the executor
gives it the Gloo contract's variables before any function runs, so that the function's
hvd.init() joins the job. close() ends horovod_cpp in it before the actor is ended, so its
background thread stops and its shared-memory segments are unlinked by the library itself.
"""

import os
import socket
import sys

import ray

from . import ray_logger


class Worker:
    """One worker of a RayExecutor (made into a Ray actor class by the executor)."""

    def __init__(self):
        self.executable = None

    def describe(self):
        """Where this actor runs: (node id, node IP, GPU ids given by Ray, pid, host name)."""
        ctx = ray.get_runtime_context()
        return (ctx.get_node_id(), ray.util.get_node_ip_address(),
                [str(g) for g in ray.get_gpu_ids()], os.getpid(), socket.gethostname())

    def set_env(self, env):
        """Adds `env` to this process's environment (read by the next hvd.init())."""
        os.environ.update(env)

    def start_executable(self, executable_cls, args, kwargs):
        """Builds the object that execute()'s functions receive, once the variables are set."""
        if executable_cls is not None:
            self.executable = executable_cls(*args, **kwargs)

    def execute(self, fn, log_queue=None):
        """fn(executable): the worker's persistent object (None without executable_cls)."""
        return self.call(fn, [self.executable], {}, log_queue)

    def call(self, fn, args, kwargs, log_queue=None):
        """fn(*args, **kwargs), its ray_logger.log() sending to `log_queue` (the run's, when
        the run has callbacks; else nowhere). If it raises, horovod_cpp is shut down here
        before the error goes back: the other workers' collectives then fail instead of
        waiting forever for this one (as when a process of an mpirun job exits), and the next
        function on every worker can init() the job again."""
        ray_logger.configure(log_queue)
        try:
            return fn(*args, **kwargs)
        except BaseException:
            try:
                self.close()
            except Exception:  # the function's own error is the one the driver must see
                pass
            raise
        finally:
            ray_logger.configure(None)  # the queue ends with its run

    def close(self):
        """Ends horovod_cpp here if a function started it (a no-op otherwise)."""
        basics = sys.modules.get("horovod_cpp._basics")
        if basics is not None:
            basics.shutdown()
        return os.getpid()
