"""horovod_cpp.tensorflow.elastic: Horovod's elastic API for TensorFlow 2 (eager):
TensorFlowKerasState (a Keras model and its optimizer) and TensorFlowState (a list of
variables), with the common run loop. See docs/training.md ("Elastic training")."""

import contextlib
import functools

import tensorflow as tf

from ..elastic import HorovodInternalError, HostsUpdatedInterrupt, ObjectState, State, run_fn
from ..elastic.loop import reset
from ..elastic.state import ObjectState as _ObjectState
from .functions import broadcast_variables


@contextlib.contextmanager
def _collective_errors():
    """Turns the TensorFlow errors that horovod_cpp's ops raise for a lost peer
    (UnavailableError eagerly; inside a tf.function TensorFlow replaces it by InternalError) or
    a runtime shut down under them (AbortedError) into HorovodInternalError, which the run loop
    answers with restore and reset. A collective's other errors (a mismatch is
    FailedPreconditionError) and TensorFlow's own (no "horovod_cpp" in them) pass through."""
    try:
        yield
    except (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.InternalError) as e:
        if "horovod_cpp" not in str(e):
            raise
        raise HorovodInternalError(f"horovod_cpp elastic: a collective failed in TensorFlow "
                                   f"({type(e).__name__}): {e.message}") from e


def run(func):
    """Decorator: `@hvd.elastic.run def train(state, ...)`, the common run loop
    (horovod_cpp.elastic.run_fn) with the TensorFlow errors of a lost peer taken for
    HorovodInternalError."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        with _collective_errors():
            return func(state, *args, **kwargs)

    return run_fn(wrapper, reset)


class _VariablesState(_ObjectState):
    """An ObjectState that also keeps the values of TensorFlow/Keras variables: copied to host
    memory at save, assigned back at restore, broadcast from rank 0 at sync. Subclasses say
    which variables (_variables(); asked each time, so variables created later, like an
    optimizer's slots, are included)."""

    def __init__(self, **kwargs):
        self._saved_values = None
        super().__init__(**kwargs)

    def _variables(self):
        raise NotImplementedError

    def _prepare_sync(self):
        """Creates what must exist on every rank before the broadcast (default: nothing)."""

    def _save_values(self):
        self._saved_values = [v.numpy().copy() for v in self._variables()]

    def save(self):
        self._save_values()
        super().save()

    def restore(self):
        variables = self._variables()
        if self._saved_values is not None:
            if len(variables) != len(self._saved_values):
                raise ValueError(f"horovod_cpp elastic restore: the state held "
                                 f"{len(self._saved_values)} variables at the last commit and "
                                 f"{len(variables)} now")
            for v, value in zip(variables, self._saved_values):
                v.assign(value)
        super().restore()

    def sync(self):
        self._prepare_sync()
        with _collective_errors():
            broadcast_variables(self._variables(), root_rank=0)
        super().sync()  # the plain attributes (broadcast, then saved)
        self._save_values()  # a rank that just joined restores what it synced


class TensorFlowKerasState(_VariablesState):
    """A Keras model's weights and its optimizer's variables (iterations, slots), plus plain
    attributes (epoch=0, batch=0, ...). optimizer defaults to model.optimizer. An optimizer
    not built yet is built for the model's trainable variables (here when the model has its
    weights, else at the first sync): every rank then holds the same variables before a
    broadcast, and every commit holds the same list of them."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        if model.variables:
            self._prepare_sync()  # the variable set fixed from the first commit on
        super().__init__(**kwargs)
        self._save_values()

    def _variables(self):
        variables = list(self.model.variables)
        if self.optimizer is not None and getattr(self.optimizer, "built", True):
            variables += list(self.optimizer.variables)
        return variables

    def _prepare_sync(self):
        if self.optimizer is not None and not getattr(self.optimizer, "built", True):
            self.optimizer.build(self.model.trainable_variables)


class TensorFlowState(_VariablesState):
    """A list of tf.Variables (TensorFlow 2, eager) plus plain attributes. TF1 sessions are
    not supported (session must be None)."""

    def __init__(self, variables=None, session=None, **kwargs):
        if session is not None:
            raise ValueError("horovod_cpp.tensorflow.elastic.TensorFlowState: TF1 sessions are "
                             "not supported; pass the variables of an eager TensorFlow 2 program")
        self.variables = list(variables) if variables is not None else []
        super().__init__(**kwargs)
        self._save_values()

    def _variables(self):
        return self.variables


__all__ = ["HorovodInternalError", "HostsUpdatedInterrupt", "ObjectState", "State",
           "TensorFlowKerasState", "TensorFlowState", "run", "run_fn"]
