"""torch Works of the torch.distributed backend "horovod_cpp" (process_group.py): a Work over
library handles, its future, the thread that completes futures, and the Work of a receive.
"""

import collections
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from . import mpi_ops

#: The backend's name, as given to init_process_group.
BACKEND = "horovod_cpp"

_Work = getattr(dist, "Work", None) or dist._Work  # torch 2.x's name, else 1.13's


class _Completer:
    """One thread per process that waits for the works whose futures were asked for (torch's
    DDP asks for a future per bucket and waits on it at the end of the backward pass), so
    that the backward pass goes on while the library reduces."""

    def __init__(self):
        self._cv = threading.Condition()
        self._queue = collections.deque()
        self._thread = None

    def submit(self, work):
        with self._cv:
            self._queue.append(work)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="horovod_cpp-c10d",
                                                daemon=True)
                self._thread.start()
            self._cv.notify()

    def is_current(self):
        """Whether the calling thread is the completer's (running a future's callbacks)."""
        return threading.current_thread() is self._thread

    def _run(self):
        while True:
            with self._cv:
                while not self._queue:
                    self._cv.wait()
                work = self._queue.popleft()
            work._complete()


_completer = _Completer()

#: The works not yet waited on: torch's C++ callers (DDP, _verify_params_across_processes)
#: drop the Python object as soon as the collective returns and then call wait() or
#: get_future() on the C++ side, which only reaches the overrides while the Python object
#: lives. Kept here, not in the group, so that no cycle holds a group (and torch's objects
#: that hold it, such as DDP's reducer) until the interpreter's end, where freeing them aborts.
_live = set()


class _Failed:
    """The value of a work's own future when the work failed: _value_or_raise raises it."""

    __slots__ = ("error",)

    def __init__(self, error):
        self.error = error


def _value_or_raise(future):
    """The chaining callback of a work's future (see get_future)."""
    value = future.value()
    if isinstance(value, _Failed):
        raise value.error
    return value


def _seconds(timeout):
    """A timeout (timedelta or seconds) in seconds; None for none (None, zero or negative,
    as torch's kNoTimeout)."""
    if timeout is None:
        return None
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    return seconds if seconds > 0 else None


class _HorovodWork(_Work):
    """A torch Work over a horovod_cpp handle. finish() waits for the handle and writes the
    result where torch expects it; it returns the tensors a future of this work holds. A
    collective not done within the group's timeout (or wait()'s own) fails with a
    RuntimeError, as on torch's other backends; the operation itself stays pending."""

    def __init__(self, what, handles, finish, tensors, timeout):
        super().__init__()
        self._what = what
        self._timeout = timeout
        self._handles = handles
        # A future holding CUDA tensors must name their devices (torch checks it).
        self._devices = sorted({t.device for t in tensors if t.is_cuda}, key=str)
        self._finish = finish
        self._lock = threading.Lock()
        self._done = False
        self._result = None
        self._error = None
        self._future = None
        self._chained = None
        _live.add(self)  # until wait() or get_future()

    def _await(self, timeout):
        """Waits up to `timeout` seconds (None: no limit) for the handles to complete; raises
        RuntimeError when they have not."""
        if timeout is None:
            return
        deadline = time.monotonic() + timeout
        for h in self._handles:
            left = max(0.0, deadline - time.monotonic())
            if mpi_ops._wait_done(h, left) is False:
                raise RuntimeError(
                    f"torch.distributed.{self._what} on the {BACKEND} backend did not complete "
                    f"within {timeout:g} s (the group's timeout, or wait()'s): some rank of the "
                    "group has not reached it (rank 0's stall report names the ranks missing); "
                    "as with torch's other backends, the group is not usable after a timeout")

    def _complete(self, timeout=None):
        with self._lock:
            if not self._done:
                try:
                    self._await(timeout if timeout is not None else self._timeout)
                    self._result = self._finish()
                except BaseException as e:  # handed to wait() and to the future
                    self._error = e
                self._done = True
            future = self._future
        if future is not None and not future.done():
            future.set_result(_Failed(self._error) if self._error is not None else self._result)

    def wait(self, timeout=None):
        _live.discard(self)
        self._complete(_seconds(timeout))
        if self._error is not None:
            raise self._error
        return True

    def is_completed(self):
        if self._done:
            return True
        try:
            return all(mpi_ops.poll(h) for h in self._handles)
        except ValueError:  # consumed meanwhile by finish() on another thread
            return self._done

    def is_success(self):
        return self._done and self._error is None

    def exception(self):
        return self._error

    def result(self):
        self.wait()
        return self._result

    def synchronize(self):
        self.wait()

    def get_future(self):
        _live.discard(self)
        with self._lock:
            if self._chained is not None:
                return self._chained
            # torch's callers get a future chained to the work's own: an error raised in the
            # chaining callback fails it on torch's C++ side, which C++ callers (DDP's
            # reducer) see. set_exception() would store the error as the future's value,
            # which only Python callers unwrap (DDP's reducer read it as tensors and crashed).
            self._future = torch.futures.Future(devices=self._devices or None)
            self._chained = self._future.then(_value_or_raise)
            chained = self._chained
            done = self._done
        if done or _completer.is_current():
            # Done, or asked from a callback of another future (PowerSGD's hook waits on a
            # future inside its callbacks): completed here, as the completer is this thread.
            self._complete()
        else:
            self._complete_later()
        return chained

    def _complete_later(self):
        """Completes the work and its future on another thread."""
        _completer.submit(self)


class _RecvWork(_HorovodWork):
    """A receive (see _p2p): waits for its message in the store, then copies it in. Its
    future completes on a thread of its own, so that a message that comes late never holds
    up the futures of the collectives (DDP's) behind it."""

    def __init__(self, mailbox, key, src, tensor, timeout):
        what = f"torch.distributed.recv on the {BACKEND} backend (from rank {src} of the group)"

        def finish():
            mailbox.take(key, tensor, what)
            return [tensor]
        super().__init__("recv", [], finish, [tensor], timeout)
        self._mailbox = mailbox
        self._key = key
        self._src = src

    def _await(self, timeout):
        if not self._mailbox.wait(self._key, timeout):
            raise RuntimeError(
                f"torch.distributed.recv on the {BACKEND} backend did not complete within "
                f"{timeout:g} s (the group's timeout, or wait()'s): rank {self._src} of the "
                "group has not sent the message")

    def is_completed(self):
        if not self._done and self._mailbox.arrived(self._key):
            self._complete()  # the tensor holds the message once this says True
        return self._done

    def _complete_later(self):
        threading.Thread(target=self._complete, name="horovod_cpp-recv", daemon=True).start()
