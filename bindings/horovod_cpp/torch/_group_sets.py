"""torch's `process_group=` arguments, resolved to horovod_cpp process sets.

A group of torch.distributed's "horovod_cpp" backend (process_group.py) runs on a process set
and names it as `group.process_set`; modules that take torch's `process_group=` beside
horovod_cpp's `process_set=` (DistributedDataParallel, SyncBatchNorm) run in that set.
"""

from .._basics import global_process_set


def process_set_of(what, process_group=None, process_set=global_process_set):
    """The process set `what` runs in, given torch's `process_group` (None, or a group of the
    "horovod_cpp" backend) and horovod_cpp's `process_set` (which may also be such a group,
    passed where torch's signature has process_group). ValueError for a group of another
    backend, or for a group and a set that differ."""
    if process_group is None and hasattr(process_set, "process_set"):
        process_group, process_set = process_set, global_process_set
    if process_group is None:
        return process_set
    group_set = getattr(process_group, "process_set", None)
    if group_set is None:
        raise ValueError(f"{what}(process_group=...): a group of torch.distributed's "
                         "'horovod_cpp' backend (its process set is used), or pass "
                         "process_set=hvd.ProcessSet(ranks) (registered with "
                         "hvd.add_process_set)")
    if process_set is not global_process_set and process_set is not group_set:
        raise ValueError(f"{what}: process_group and process_set name different sets; give "
                         "one of them")
    return group_set
