"""The elastic run loop (Horovod's semantics) and the reset it uses."""

import functools

from .._basics import HorovodInternalError, init, shutdown
from .state import HostsUpdatedInterrupt, _is_recoverable


def reset():
    """Leaves the current membership and joins the next one: shutdown(), then init(), which
    in an elastic job waits for this worker's next assignment from the driver. An init() that
    fails (the driver ended the job: `end,<reason>`) raises out of the run loop."""
    shutdown()
    init()


def run_fn(func, reset_fn):
    """Wraps func(state, *args, **kwargs) in the elastic loop:

        loop: state.sync(); return func(state, ...)
              on HorovodInternalError (a peer was lost): state.restore(), reset
              on HostsUpdatedInterrupt (hosts were added): keep the state, reset
        reset: reset_fn() (shutdown() + init()), then state.on_reset()

    A sync() that fails is handled like a failure inside func. Any other exception, a
    MismatchError included, leaves the loop (the driver then ends or shrinks the job)."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                skip_sync = False
                return func(state, *args, **kwargs)
            except HorovodInternalError as e:
                if not _is_recoverable(e):
                    raise
                state.restore()
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            reset_fn()
            state.on_reset()

    return wrapper


def run(func):
    """Decorator: `@hvd.elastic.run def train(state, ...)`; see run_fn."""
    return run_fn(func, reset)
