"""broadcast_parameters, broadcast_optimizer_state, broadcast_object, allgather_object."""


import torch

from .. import _objects
from .._basics import _set_id, global_process_set, rank
from .mpi_ops import _check_tensor, broadcast_async_, synchronize


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Overwrites, in place, every tensor of `params` with its value on root_rank.

    params: a dict (model.state_dict()) or a list of (name, tensor) pairs or of tensors
    (list(model.named_parameters()), list(model.parameters())).
    """
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, list):
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError("invalid params of type: %s" % type(params))
    # Every tensor is checked before the first broadcast is submitted, so a bad entry cannot
    # leave some broadcasts pending.
    for name, p in items:
        if p is not None:
            _check_tensor(p, f"params[{name!r}]" if name is not None else "a parameter")
    _set_id(process_set)
    handles = []
    for i, (name, p) in enumerate(items):
        if p is None:
            continue
        key = f"broadcast_parameters.{name if name is not None else i}"
        handles.append(broadcast_async_(p, root_rank, key, process_set=process_set))
    for h in handles:
        synchronize(h)


def _step_without_allreduce(optimizer):
    from .adasum_optimizer import _DistributedAdasumOptimizer
    from .optimizer import _DistributedOptimizer
    from .semisync import _SemiSyncOptimizer
    if isinstance(optimizer, (_DistributedOptimizer, _DistributedAdasumOptimizer,
                              _SemiSyncOptimizer)):
        optimizer._hvd_base_class.step(optimizer)
    else:
        optimizer.step()


def broadcast_optimizer_state(optimizer, root_rank, process_set=global_process_set):
    """Makes the optimizer state of every rank equal to root_rank's: tensor state (momentum,
    Adam moments, step), scalar state, and every param-group option (lr, betas, ...).

    A fresh optimizer whose state is empty is first initialised, as Horovod does, by a step
    with zero gradients (on a DistributedOptimizer, a step of the wrapped optimizer, without
    allreduce); the parameters are then restored to their values before that step.
    torch.optim.LBFGS is refused (ValueError).
    """
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    _set_id(process_set)  # a registered set (membership is checked by the first broadcast)
    if len(optimizer.state_dict()["state"]) == 0:
        # Only the state's creation matters: the parameters are restored afterwards (a
        # zero-gradient step still moves them under weight decay), unlike Horovod.
        saved = [(p, p.detach().clone()) for group in optimizer.param_groups
                 for p in group["params"]]
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.requires_grad and p.grad is None:
                    p.grad = torch.zeros_like(p)
                    if isinstance(optimizer, torch.optim.SparseAdam):
                        p.grad = p.grad.to_sparse()
        _step_without_allreduce(optimizer)
        with torch.no_grad():
            for p, value in saved:
                p.copy_(value)

    # The parameters in state_dict() order (its integer ids).
    params = [p for group in optimizer.param_groups for p in group["params"]]

    # Root describes its state; tensor values travel separately, in place, without pickling.
    description = None
    if rank() == root_rank:
        groups = [{k: v for k, v in group.items() if k != "params"}
                  for group in optimizer.param_groups]
        state = {}
        for pid, p in enumerate(params):
            if p not in optimizer.state:
                continue
            entry = {}
            for key, value in optimizer.state[p].items():
                if torch.is_tensor(value):
                    entry[key] = ("tensor", tuple(value.shape), value.dtype, value.device.type)
                else:
                    entry[key] = ("value", value)
            state[pid] = entry
        description = {"groups": groups, "state": state}
    description = _objects.broadcast_object(description, root_rank,
                                            name="broadcast_optimizer_state.description",
                                            process_set=process_set)

    if len(description["groups"]) != len(optimizer.param_groups):
        raise ValueError(f"broadcast_optimizer_state: root rank has "
                         f"{len(description['groups'])} param groups, this rank "
                         f"{len(optimizer.param_groups)}")
    for group, options in zip(optimizer.param_groups, description["groups"]):
        group.update(options)

    handles = []
    for pid in sorted(description["state"]):
        p = params[pid]
        pstate = optimizer.state[p]
        for key, spec in sorted(description["state"][pid].items()):
            if spec[0] == "value":
                pstate[key] = spec[1]
                continue
            _, shape, dtype, device_type = spec
            # Where root keeps it: on this rank's parameter device for root's CUDA state (Adam's
            # moments of a CUDA model), on the CPU for root's CPU state (Adam's step count).
            device = p.device if device_type == "cuda" and p.is_cuda else torch.device("cpu")
            current = pstate.get(key)
            if (not torch.is_tensor(current) or tuple(current.shape) != shape
                    or current.dtype != dtype or current.device != device):
                current = torch.zeros(shape, dtype=dtype, device=device)
                pstate[key] = current
            handles.append(broadcast_async_(current, root_rank,
                                            f"broadcast_optimizer_state.{pid}.{key}",
                                            process_set=process_set))
    for h in handles:
        synchronize(h)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Returns root_rank's `obj` on every rank (pickled)."""
    return _objects.broadcast_object(obj, root_rank, name, process_set)


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns the list of every rank's `obj`, in rank order (pickled)."""
    return _objects.allgather_object(obj, name, process_set)


__all__ = ["broadcast_parameters", "broadcast_optimizer_state", "broadcast_object",
           "allgather_object"]
