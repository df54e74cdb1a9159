"""What the Python module accepts as memory, and how long it keeps it: duck-typed objects and
unaligned arrays are refused (on every rank, before anything is submitted), the integer
handles of horovod_cpp.torch keep their tensors' storage while in flight, and
synchronize_all consumes no handle when reading the sequence fails."""

import gc
import weakref

import numpy as np
import pytest
import torch

import horovod_cpp as hvd_np
import horovod_cpp.torch as hvd
from horovod_cpp import _C
from conftest import rank_data


class FakeTensor:
    """Has everything duck typing looked at; data_ptr() points at a real buffer, counted."""

    def __init__(self, n):
        self.buf = np.zeros(n, np.float32)
        self.calls = 0
        self.is_cpu, self.is_sparse, self.dtype, self.shape = True, False, torch.float32, (n,)
        self.device = torch.device("cpu")

    def is_contiguous(self):
        return True

    def data_ptr(self):
        self.calls += 1
        return self.buf.ctypes.data


def summed(size, shape, seed):
    return sum(rank_data(r, shape, "float32", seed).astype(np.float64)
               for r in range(size)).astype(np.float32)


def check_next_allreduce_works(rank, size, name):
    x = torch.from_numpy(rank_data(rank, (64,), "float32", 7))
    hvd.synchronize(hvd.allreduce_async_(x, name=name, op=hvd.Sum))
    np.testing.assert_allclose(x.numpy(), summed(size, (64,), 7), rtol=1e-5, atol=1e-5)


def test_duck_typed_objects_are_refused(rank, size):
    fake = FakeTensor(16)
    with pytest.raises(TypeError, match="expected a numpy.ndarray or a torch.Tensor"):
        _C.dtype_name(fake)
    # The one native allreduce entry, as numpy calls it and as horovod_cpp.torch calls it.
    with pytest.raises(TypeError, match="expected a numpy.ndarray or a torch.Tensor"):
        _C.allreduce_async(fake, None, "t.fake.np", hvd.Sum, 1.0, 1.0, hvd.global_process_set,
                           None, False)
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        _C.allreduce_async(fake, None, "t.fake.fast", hvd.Sum, 1.0, 1.0, hvd.global_process_set,
                           None, True)
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        hvd.allreduce_async_(fake, name="t.fake.torch")
    assert fake.calls == 0, "the library read the address of a non-tensor"
    # A real subclass is a tensor.
    p = torch.nn.Parameter(torch.from_numpy(rank_data(rank, (8,), "float32", 3)))
    assert _C.dtype_name(p) == "float32"
    check_next_allreduce_works(rank, size, "t.fake.after")


def test_unaligned_numpy_arrays_are_refused(rank, size):
    raw = np.zeros(4 * 16 + 1, np.uint8)
    unaligned = raw[1:].view(np.float32)
    assert not unaligned.flags.aligned and unaligned.flags.c_contiguous
    with pytest.raises(ValueError, match="not aligned for its dtype"):
        hvd_np.allreduce_async_(unaligned, name="t.unaligned")
    ok = rank_data(rank, (16,), "float32", 9).copy()
    hvd_np.allreduce_(ok, op=hvd_np.Sum, name="t.aligned.after")
    np.testing.assert_allclose(ok, summed(size, (16,), 9), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("how", ["set_", "data"])
def test_handle_keeps_storage_when_tensor_is_repointed(rank, size, how):
    """The input's memory belongs to a numpy array (weakly referenced): pointing the tensor
    at other storage in flight must not free it before the handle is synchronized, and the
    reduction lands in it."""
    n = 1 << 16
    arr = rank_data(rank, (n,), "float32", 21).copy()
    alive = weakref.ref(arr)
    x = torch.from_numpy(arr)
    del arr
    h = hvd.allreduce_async_(x, name=f"t.repoint.{how}", op=hvd.Sum)
    if how == "set_":
        x.set_(torch.zeros(3))
    else:
        x.data = torch.zeros(3)
    gc.collect()
    kept = alive()
    assert kept is not None, "the storage in flight was freed"
    hvd.synchronize(h)
    np.testing.assert_allclose(kept, summed(size, (n,), 21), rtol=1e-5, atol=1e-4)
    del kept
    gc.collect()
    assert alive() is None, "the storage was not released after synchronize"
    check_next_allreduce_works(rank, size, f"t.repoint.{how}.after")


class RaisingSequence:
    """A sequence whose item `bad` cannot be read."""

    def __init__(self, items, bad):
        self.items, self.bad = items, bad

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        if i == self.bad:
            raise RuntimeError("item cannot be read")
        return self.items[i]


def test_synchronize_all_consumes_nothing_when_an_item_raises(rank, size):
    xs = [torch.from_numpy(rank_data(rank, (32,), "float32", 60 + i)) for i in range(3)]
    hs = [hvd.allreduce_async_(x, name=f"t.raise.{i}", op=hvd.Sum) for i, x in enumerate(xs)]
    before = _C.torch_handle_count()
    with pytest.raises(RuntimeError, match="item cannot be read"):
        _C.torch_handle_synchronize_all(RaisingSequence(hs, bad=2))
    assert _C.torch_handle_count() == before  # nothing taken (or destroyed) in flight
    for i, (x, h) in enumerate(zip(xs, hs)):
        assert hvd.synchronize(h) is x
        np.testing.assert_allclose(x.numpy(), summed(size, (32,), 60 + i), rtol=1e-5, atol=1e-5)
