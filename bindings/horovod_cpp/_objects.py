"""broadcast_object / allgather_object: pickled Python objects over byte collectives."""

import pickle

import numpy as np

from . import _C
from ._basics import _object_call_done, _object_call_name, _set_id, global_process_set, rank


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Returns root_rank's (a global rank) `obj` on every rank of the set (pickled; every rank,
    root included, gets an unpickled copy). Unnamed calls are named "broadcast_object.<n>"
    (n counts this set's unnamed calls whose size broadcast completed), so other unnamed
    broadcasts, or a call that failed everywhere it ran, do not shift the pairing."""
    sid = _set_id(process_set)
    root_rank = int(root_rank)
    if rank() == root_rank:
        payload = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), dtype=np.uint8).copy()
        length = np.array([payload.size], dtype=np.int64)
    else:
        payload = None
        length = np.zeros(1, dtype=np.int64)
    base, counter = _object_call_name("broadcast_object", name, sid)
    _C.broadcast_async(length, root_rank, f"{base}.size", sid).wait()
    _object_call_done(counter)
    if payload is None:
        payload = np.empty(int(length[0]), dtype=np.uint8)
    _C.broadcast_async(payload, root_rank, f"{base}.data", sid).wait()
    return pickle.loads(payload.tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns the list of every rank's `obj`, in rank order (pickled).

    Unnamed calls get their own names, "allgather_object.<n>" (n counts this set's unnamed
    calls whose size exchange completed), so they pair up across ranks regardless of other
    unnamed allgathers, and a call that failed everywhere it ran (for instance while another
    rank had joined) does not shift the numbering."""
    sid = _set_id(process_set)
    payload = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), dtype=np.uint8).copy()
    base, counter = _object_call_name("allgather_object", name, sid)
    sizes = _C.allgather_async(np.array([payload.size], dtype=np.int64), f"{base}.sizes", sid).result()
    _object_call_done(counter)
    data = _C.allgather_async(payload, f"{base}.data", sid).result()
    out, offset = [], 0
    for n in sizes.tolist():
        out.append(pickle.loads(data[offset:offset + n].tobytes()))
        offset += n
    return out
