"""The framework-free half of the elastic API: the exceptions, the State protocol and
ObjectState (plain Python attributes kept in step with broadcast_object).

A state has three duties, all collective except restore(): commit() keeps a copy of the
training state in memory (then asks whether the membership should change), restore() puts the
last copy back after a failure, and sync() makes every rank hold rank 0's state after the
membership changed (rank 0 of a new membership is always a worker that held the last commit).
"""

import copy

from .. import _C
from .._basics import HorovodInternalError, MismatchError, rank
from .._objects import broadcast_object


class HostsUpdatedInterrupt(RuntimeError):
    """Raised by State.commit() / check_host_updates() on every rank at once when the driver
    asked for a new membership without a failure (hosts were added). The elastic run loop
    catches it, keeps the state as it is (nothing is lost: the commit just happened) and resets.

    skip_sync: True when the survivors need no sync after the reset (no rank joins with an
    unknown state); the run loop then calls the training function again at once."""

    def __init__(self, skip_sync=False):
        super().__init__("horovod_cpp elastic: the membership of this job changes (hosts were "
                         "added); the run loop re-initialises the ranks")
        self.skip_sync = bool(skip_sync)


def _broadcast_from_0(obj):
    return broadcast_object(obj, 0, name="horovod_cpp.elastic.objects")


def _hosts_updated():
    """Whether the driver flagged the current generation for a new membership: a collective
    (rank 0 asks the store, the answer is broadcast), so every rank gets the same answer."""
    return bool(_C.elastic_hosts_updated())


class State:
    """What the elastic run loop needs of a training state. Subclasses implement save(),
    restore() and sync(); reset() (optional) adapts the state to a new size.

    bcast_object: called as bcast_object(obj), returns rank 0's obj on every rank (default
    horovod_cpp's broadcast_object from rank 0); get_rank: the rank function (default
    horovod_cpp.rank)."""

    def __init__(self, bcast_object=None, get_rank=None):
        self._bcast_object = bcast_object if bcast_object is not None else _broadcast_from_0
        self._get_rank = get_rank if get_rank is not None else rank
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Adds functions (a list, or one callable) called with no argument after every reset,
        once the new membership is initialised: the place to rescale the learning rate or
        rebuild anything sized by hvd.size()."""
        if callable(callbacks):
            callbacks = [callbacks]
        for cb in callbacks:
            if not callable(cb):
                raise TypeError(f"register_reset_callbacks: {cb!r} is not callable")
            self._reset_callbacks.append(cb)

    def on_reset(self):
        """Called by the run loop after every reset (shutdown() + init()): reset(), then the
        registered callbacks in registration order."""
        self.reset()
        for cb in self._reset_callbacks:
            cb()

    def commit(self):
        """Saves the state in memory (the point restore() returns to after a failure), then
        checks for a membership change (HostsUpdatedInterrupt). Collective: every rank commits
        at the same step. Its cost is a copy of the state plus one small broadcast, so commit
        every few batches rather than every batch when the model is large."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank when the driver asked for a new
        membership (hosts were added), otherwise returns. Collective."""
        if _hosts_updated():
            raise HostsUpdatedInterrupt(skip_sync=False)

    def save(self):
        """Keeps a copy of the current state (local, no communication)."""
        raise NotImplementedError

    def restore(self):
        """Puts back the copy kept by the last save() (local, no communication)."""
        raise NotImplementedError

    def sync(self):
        """Makes every rank's state equal to rank 0's and saves it (collective)."""
        raise NotImplementedError

    def reset(self):
        """Adapts the state to the new membership after a reset (default: nothing)."""


class ObjectState(State):
    """A state made of picklable Python attributes, given as keyword arguments:

        state = ObjectState(epoch=0, batch=0, history=[])
        state.epoch += 1; state.commit()

    save() keeps deep copies (in-place changes of a list after a commit are undone by restore());
    sync() broadcasts rank 0's current values, then saves them."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        super().__init__(bcast_object, get_rank)
        self._saved_state = {}
        for name, value in kwargs.items():
            setattr(self, name, value)
        self._object_names = list(kwargs)
        self._save_objects()

    def _save_objects(self):
        self._saved_state = {name: copy.deepcopy(getattr(self, name))
                             for name in self._object_names}

    def _set_objects(self, values):
        for name, value in values.items():
            setattr(self, name, copy.deepcopy(value))

    def save(self):
        self._save_objects()

    def restore(self):
        self._set_objects(self._saved_state)

    def sync(self):
        if self._object_names:
            current = {name: getattr(self, name) for name in self._object_names}
            self._set_objects(self._bcast_object(current))
        self._save_objects()


def _is_recoverable(error):
    """Whether the run loop restores the last commit and re-initialises after `error`: a lost
    peer and what it leaves behind (a shut-down runtime, a failed transport) are; a
    MismatchError is the program's own bug, which would recur after every reset."""
    return isinstance(error, HorovodInternalError) and not isinstance(error, MismatchError)
