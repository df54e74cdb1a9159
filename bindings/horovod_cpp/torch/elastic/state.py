"""TorchState: a model, an optimizer, ElasticSamplers, learning-rate schedulers and plain
attributes kept as one elastic state."""

import copy

import torch

from ...elastic.state import ObjectState
from ..functions import allgather_object, broadcast_object, broadcast_optimizer_state, \
    broadcast_parameters
from .sampler import ElasticSampler


#: Learning-rate schedulers (a TorchState keeps their state_dict(), which leaves out the
#: optimizer they drive): the base class under both of its torch names, and ReduceLROnPlateau,
#: which is not one of its subclasses in every torch version.
_SCHEDULERS = tuple(c for c in (getattr(torch.optim.lr_scheduler, "LRScheduler", None),
                                getattr(torch.optim.lr_scheduler, "_LRScheduler", None),
                                torch.optim.lr_scheduler.ReduceLROnPlateau) if c is not None)


class _Handler:
    """One stateful object of a TorchState (a module, an optimizer, an ElasticSampler, a
    learning-rate scheduler): its state_dict() deep-copied at save and loaded back at restore
    (modules and optimizers copy what they load; for the others, `copy_on_load`, a fresh copy
    is loaded, so the saved one stays intact for the next restore); `sync_fn(value)` brings it
    to rank 0's state, which is then saved."""

    def __init__(self, value, sync_fn, copy_on_load=False):
        self.value = value
        self._sync_fn = sync_fn
        self._copy_on_load = copy_on_load
        self.save()

    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        saved = copy.deepcopy(self._saved) if self._copy_on_load else self._saved
        self.value.load_state_dict(saved)

    def sync(self):
        self._sync_fn(self.value)
        self.save()

    def reset(self):
        if isinstance(self.value, ElasticSampler):
            self.value.reset()  # re-shard over the new size


def _sync_model(model):
    broadcast_parameters(model.state_dict(), root_rank=0)


def _sync_optimizer(optimizer):
    broadcast_optimizer_state(optimizer, root_rank=0)


def _sync_sampler(sampler):
    """The union of every rank's processed set (what any rank recorded was trained on by all)
    and rank 0's epoch."""
    every = allgather_object(sampler.processed_indices,
                             name="horovod_cpp.elastic.sampler.processed")
    state = sampler.state_dict()
    state["processed_indices"] = set().union(*every)
    sampler.load_state_dict(broadcast_object(state, 0, name="horovod_cpp.elastic.sampler.state"))


def _sync_scheduler(scheduler):
    """Rank 0's schedule (its step count and learning rates); the optimizer's own state is
    its handler's."""
    scheduler.load_state_dict(broadcast_object(scheduler.state_dict(), 0,
                                               name="horovod_cpp.elastic.scheduler.state"))


def _handler_for(value):
    if isinstance(value, torch.nn.Module):
        return _Handler(value, _sync_model)
    if isinstance(value, torch.optim.Optimizer):
        return _Handler(value, _sync_optimizer)
    if isinstance(value, ElasticSampler):
        return _Handler(value, _sync_sampler)
    if isinstance(value, _SCHEDULERS):
        return _Handler(value, _sync_scheduler, copy_on_load=True)
    return None


class TorchState(ObjectState):
    """The elastic state of a PyTorch training loop, as Horovod's:

        state = hvd.elastic.TorchState(model, optimizer, sampler=train_sampler, epoch=0, batch=0)

    Keyword arguments that are modules, optimizers, ElasticSamplers or learning-rate schedulers
    (Horovod's examples pass scheduler=...) are handled like `model` and `optimizer` (their
    state_dict() copied at commit, rank 0's loaded at sync); the others
    are plain attributes (ObjectState). Every one is an attribute of the state; assigning a new
    model or optimizer to it (state.model = m) makes the state follow the new object."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        handlers, objects = {}, {}
        for name, value in dict(kwargs, model=model, optimizer=optimizer).items():
            handler = _handler_for(value)
            if handler is not None:
                handlers[name] = handler
            elif name not in ("model", "optimizer") or value is not None:
                objects[name] = value
        object.__setattr__(self, "_handlers", handlers)
        for name, handler in handlers.items():
            object.__setattr__(self, name, handler.value)
        if model is None:
            object.__setattr__(self, "model", None)
        if optimizer is None:
            object.__setattr__(self, "optimizer", None)
        super().__init__(**objects)

    def __setattr__(self, name, value):
        handlers = self.__dict__.get("_handlers")
        if handlers is not None and name in handlers:
            handler = _handler_for(value)
            if handler is None or handler._sync_fn is not handlers[name]._sync_fn:
                raise TypeError(f"TorchState.{name} holds a {type(handlers[name].value).__name__}"
                                f"; cannot replace it with {type(value).__name__}")
            handlers[name] = handler
        object.__setattr__(self, name, value)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self):
        for handler in self._handlers.values():
            handler.sync()
        super().sync()

    def reset(self):
        for handler in self._handlers.values():
            handler.reset()
        super().reset()
