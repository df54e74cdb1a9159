"""Horovod's ray_logger: a worker sends dicts to the driver, where the run's callbacks get them.

In a worker (a function run by RayExecutor.run or ElasticRayExecutor.run)::

    from horovod_cpp.ray import ray_logger
    ray_logger.log({"epoch": epoch, "loss": loss})          # rank 0's only
    ray_logger.log({"rank": hvd.rank(), ...}, chief_only=False)  # every rank's

and on the driver ``executor.run(train, callbacks=[print])`` calls each callback with each
dict. The dicts travel through one Ray queue per run (ray.util.queue.Queue: an actor pinned to
the driver's node, holding no CPU, that workers on any node reach through Ray). The driver's
LogRelay makes it, hands it to every worker the run starts, calls the callbacks from a thread
of its own as the dicts arrive, and at the end of the run delivers what is left and ends the
queue's actor. log() waits until its dict is in the queue, so every dict logged before a
worker's function returned reaches the callbacks before run() returns.

Thread ownership: `_queue` and `_warned` belong to the worker process (set by the Worker actor
around each call, read by log() in the user's function); a LogRelay's callbacks run only on its
delivery thread.
"""

import os
import sys
import threading
import traceback
import uuid
import warnings

import ray
from ray.util.queue import Queue
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

# ---- in the worker ---------------------------------------------------------------------------
#: The queue of the run this worker process is in, or None when no run with callbacks is.
_queue = None
#: Whether this process has warned that log() had nowhere to send its dict (warned once).
_warned = False


def configure(queue):
    """Sets the queue this process's log() sends to: the run's (the Worker actor does this
    before each function it runs), or None (after it)."""
    global _queue
    _queue = queue


def log(info_dict, chief_only=True):
    """Sends `info_dict` (anything Ray can serialize; a dict of values, as in Horovod) to the
    driver, where every callback passed to the executor's run() is called with it, in the
    order this worker logged.

    chief_only: send only from rank 0 (True, the default) or from every rank. The rank is
    the worker's current one: horovod_cpp's rank() while it is initialized (in an elastic job
    it follows the membership), else HOROVOD_RANK (the rank the worker was started with,
    Horovod's rule). Where no run listens (outside a run, or a run without callbacks), the
    dict is dropped and the first such call in the process warns.
    """
    global _queue
    if chief_only:
        rank = _current_rank()
        if rank is not None and rank != 0:
            return
    queue = _queue
    if queue is None:
        _warn_once("`ray_logger.log` called but logging is not configured: call it inside a "
                   "function run by RayExecutor.run or ElasticRayExecutor.run with callbacks")
        return
    try:
        queue.put(info_dict)
    except ray.exceptions.RayActorError:
        # The run ended and took its queue with it (a worker still running after run() gave
        # up on it): logging must not fail the worker's function.
        _queue = None
        _warn_once("`ray_logger.log`: the run this worker logged to has ended; dict dropped")


def _current_rank():
    """horovod_cpp's rank() while it is initialized, else HOROVOD_RANK, else None. Never
    imports horovod_cpp itself: a function that did not init() has no rank to ask."""
    basics = sys.modules.get("horovod_cpp._basics")
    if basics is not None and basics.is_initialized():
        return basics.rank()
    try:
        return int(os.environ["HOROVOD_RANK"])
    except (KeyError, ValueError):
        return None


def _warn_once(message):
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(message, stacklevel=3)


# ---- on the driver ---------------------------------------------------------------------------
def check_callbacks(who, callbacks):
    """`callbacks` as a list, each checked callable (TypeError naming the caller if not)."""
    out = list(callbacks or [])
    for cb in out:
        if not callable(cb):
            raise TypeError(f"{who}: callbacks must be callables, got {cb!r}")
    return out


class LogRelay:
    """The dicts logged during one run(), carried to `callbacks` on the driver.

    Made by run() when it has callbacks: `queue` goes to every worker the run starts (the
    Worker actor configures log() with it), and close(), called when the run ends, delivers
    the dicts still queued and ends the queue's actor, so none is left behind.

    Each dict is handed to every callback in turn, one dict at a time, in the order the queue
    received them (each worker's in the order it logged), on this object's delivery thread,
    while the job runs. A callback that raises is reported (a RuntimeWarning carrying its
    traceback) and not called again in this run; the other callbacks and the job go on. In
    Horovod such an exception ends the thread that calls the callbacks, so no callback gets
    any later dict, and run() returns as usual.
    """

    #: How long close() waits for the callbacks to take the dicts still queued.
    close_timeout_s = 60.0

    def __init__(self, callbacks):
        self._callbacks = list(callbacks)
        node = ray.get_runtime_context().get_node_id()
        # On the driver's node (it lives and dies with the run the driver runs), no CPU held
        # (the jobs' workers count the nodes' CPUs), and never restarted: a new one would
        # have lost the dicts queued.
        self.queue = Queue(actor_options={
            "num_cpus": 0, "max_restarts": 0,
            "scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=False)})
        # What close() queues after the workers' last dict: no worker can log it by chance.
        self._end = ("horovod_cpp.ray_logger: end of run", uuid.uuid4().hex)
        self._closed = False
        #: How many dicts have been delivered (to every callback still called).
        self.delivered = 0
        self._thread = threading.Thread(target=self._deliver_all, name="horovod_cpp.ray_logger",
                                        daemon=True)
        self._thread.start()

    def close(self):
        """Delivers the dicts still queued (all that were logged: log() returns once its dict
        is queued), waiting up to close_timeout_s for the callbacks, then ends the queue's
        actor. Call it once every worker of the run has finished or been killed."""
        try:
            self.queue.put(self._end)
        except ray.exceptions.RayError:
            pass  # the queue is gone: the delivery thread has ended (and warned)
        self._thread.join(timeout=self.close_timeout_s)
        self._closed = True
        if self._thread.is_alive():
            warnings.warn(f"ray_logger: the run's callbacks did not take the logged dicts "
                          f"within {self.close_timeout_s:g} s; the rest are dropped",
                          RuntimeWarning, stacklevel=2)
        ray.kill(self.queue.actor, no_restart=True)

    def _deliver_all(self):
        while True:
            try:
                item = self.queue.get(block=True)
            except ray.exceptions.RayError as e:  # the queue's actor is gone
                if not self._closed:
                    warnings.warn(f"ray_logger: the run's log queue failed ({e}); later dicts "
                                  "are lost", RuntimeWarning)
                return
            # Not item == self._end: a logged object's == need not return a bool (numpy).
            if (type(item) is tuple and len(item) == 2 and type(item[1]) is str
                    and item[1] == self._end[1]):
                return
            self._deliver(item)

    def _deliver(self, item):
        for cb in list(self._callbacks):
            try:
                cb(item)
            except Exception as e:
                self._callbacks.remove(cb)
                warnings.warn(f"ray_logger: callback {cb!r} raised {type(e).__name__}: {e}; "
                              "it is not called again in this run (the job goes on)\n"
                              + traceback.format_exc(), RuntimeWarning)
        self.delivered += 1
