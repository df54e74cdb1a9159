"""The framework-free gradient engine (horovod_cpp._gradients) and semi-sync schedule
(horovod_cpp._semisync), driven through a NumPy glue over real collectives: grouping,
scaling, pass counting, sparse routing and compression, each expected value computed on every
rank from every rank's seeded data. Also: the engine modules import no framework."""

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import horovod_cpp as hvd
from horovod_cpp import _gradients as eng
from horovod_cpp._compression import compression_for
from horovod_cpp._semisync import LOCAL, STALE, WARMUP, SemiSyncSchedule
from conftest import rank_data


class Rows:
    """A sparse gradient for the NumPy glue: some rows of a (nrows, k) matrix (repeats add)."""

    def __init__(self, indices, values, nrows):
        self.indices, self.values, self.nrows = indices, values, nrows

    def dense(self):
        out = np.zeros((self.nrows,) + self.values.shape[1:], self.values.dtype)
        np.add.at(out, self.indices, self.values)
        return out


class NumpyOps:
    """The engine's tensor ops on numpy arrays, over horovod_cpp's numpy collectives."""

    @staticmethod
    def is_sparse(g):
        return isinstance(g, Rows)

    @staticmethod
    def densify(g):
        return g.dense(), "rows"

    @staticmethod
    def restore(dense, layout):
        assert layout == "rows"
        nz = np.flatnonzero(np.any(dense != 0, axis=1))
        return Rows(nz, dense[nz], dense.shape[0])

    allreduce = staticmethod(hvd.allreduce_async_)
    grouped_allreduce = staticmethod(hvd.grouped_allreduce_async_)

    @staticmethod
    def sparse_allreduce(g, name, op, process_set):
        hi = hvd.allgather_async(g.indices, name=None if name is None else name + ".i",
                                 process_set=process_set)
        hv = hvd.allgather_async(g.values, name=None if name is None else name + ".v",
                                 process_set=process_set)
        scale = 1.0 / hvd.size() if op == hvd.Average else 1.0
        return hi, hv, g.nrows, scale

    @staticmethod
    def wait(handles):
        return [hvd.synchronize(h) for h in handles]

    @staticmethod
    def wait_group(handle):
        return hvd.synchronize(handle)

    @staticmethod
    def wait_sparse(handle):
        hi, hv, nrows, scale = handle
        return Rows(hvd.synchronize(hi), hvd.synchronize(hv) * scale, nrows)


NumpyFP16, _ = compression_for(np.float16, lambda d: np.issubdtype(d, np.floating),
                               lambda t, d: t.astype(d))


SHAPES = [(3,), (2, 4), (5,), (1,), (4, 2)]


def grads_of(r, seed):
    return [rank_data(r, s, np.float64, seed=seed + i) for i, s in enumerate(SHAPES)]


def expected(seed, op=hvd.Average):
    n = hvd.size()
    total = [sum(grads_of(r, seed)[i] for r in range(n)) for i in range(len(SHAPES))]
    return [t / n if op == hvd.Average else t for t in total]


# ---- the whole engine under mpirun ------------------------------------------------------
@pytest.mark.parametrize("groups", [None, 2, "lists"])
@pytest.mark.parametrize("op,predivide", [(hvd.Average, 1.0), (hvd.Average, 4.0),
                                          (hvd.Sum, 1.0)])
def test_reduce(rank, groups, op, predivide):
    objects = [object() for _ in SHAPES]
    if groups == "lists":
        groups = [[objects[3], objects[0]], [objects[2]]]
    options = eng.ReduceOptions(op=op, gradient_predivide_factor=predivide, groups=groups)
    seed = 11 + (0 if groups is None else 7) + int(predivide)
    engine = eng.GradientEngine(NumpyOps, options, len(SHAPES),
                                groups=eng.plan_groups(groups, objects))
    out = engine.reduce(grads_of(rank, seed))
    for got, want in zip(out, expected(seed, op)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert not engine.pending


def test_fp16_compression(rank):
    options = eng.ReduceOptions(compression=NumpyFP16)
    engine = eng.GradientEngine(NumpyOps, options, len(SHAPES))
    out = engine.reduce(grads_of(rank, 40))
    for got, want in zip(out, expected(40)):
        assert got.dtype == np.float64  # cast back after the float16 reduction
        np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("groups", [None, 1])
def test_pass_counting(rank, groups):
    """Two passes per step: nothing starts after the first; the second starts the slot (or
    the group once every member is due); a third before finish() is refused."""
    plan = eng.plan_groups(groups, list(range(len(SHAPES))))
    engine = eng.GradientEngine(NumpyOps, eng.ReduceOptions(), len(SHAPES), groups=plan,
                                backward_passes_per_step=2)
    grads = grads_of(rank, 50)
    for slot in range(len(SHAPES)):
        engine.passed(slot, grads.__getitem__)
    assert engine.pending and not engine._started
    engine.passed(0, grads.__getitem__)
    assert (0 in engine._started) == (groups is None)
    with pytest.raises(AssertionError, match="backward_passes_per_step"):
        engine.passed(0, grads.__getitem__)
    out = engine.finish(range(len(SHAPES)), grads.__getitem__)
    for i, want in enumerate(expected(50)):
        np.testing.assert_allclose(out[i], want, rtol=1e-12, atol=1e-12)
    assert not engine.pending
    engine.passed(0, grads.__getitem__)  # the count restarted
    engine.set_passes(1)
    assert not engine._started
    engine.reset()
    assert not engine.pending


@pytest.mark.parametrize("sparse_as_dense", [False, True])
@pytest.mark.parametrize("groups", [None, 1])
def test_sparse_gradients(rank, size, sparse_as_dense, groups):
    """Rows are gathered (every rank's rows, scaled for Average), or reduced dense and handed
    back as rows with sparse_as_dense; in a group they go their own way."""
    def sparse_of(r):
        rng = np.random.default_rng(70 + r)
        idx = rng.integers(0, 6, size=3)
        return Rows(idx, rank_data(r, (3, 2), np.float64, seed=71), 6)

    dense_grad = rank_data(rank, (4,), np.float64, seed=72)
    options = eng.ReduceOptions(sparse_as_dense=sparse_as_dense)
    engine = eng.GradientEngine(NumpyOps, options, 2,
                                groups=eng.plan_groups(groups, ["a", "b"]))
    out = engine.reduce([sparse_of(rank), dense_grad])
    assert isinstance(out[0], Rows)
    if not sparse_as_dense:
        assert len(out[0].indices) == 3 * size  # gathered, not reduced
    want = sum(sparse_of(r).dense() for r in range(size)) / size
    np.testing.assert_allclose(out[0].dense(), want, rtol=1e-12, atol=1e-12)
    want_dense = sum(rank_data(r, (4,), np.float64, seed=72) for r in range(size)) / size
    np.testing.assert_allclose(out[1], want_dense, rtol=1e-12, atol=1e-12)


# ---- the rules, on every rank alike ---------------------------------------------------------
def test_scales_and_refusals():
    assert eng.reduction_scales(hvd.Average, 1.0) == (1.0, 1.0)
    assert eng.reduction_scales(hvd.Average, 4.0) == (0.25, 4.0)
    assert eng.reduction_scales(hvd.Sum, 1.0) == (1.0, 1.0)
    assert eng.reduction_scales(hvd.Adasum, 1.0) == (1.0, 1.0)  # never divided by the size
    with pytest.raises(ValueError, match="gradient_predivide_factor"):
        eng.ReduceOptions(op=hvd.Sum, gradient_predivide_factor=2.0)


def test_groups_rules():
    assert eng.split_evenly(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert eng.split_evenly([1, 2], 5) == [[1], [2]]
    assert eng.split_evenly([], 3) == []
    a, b, c, d = (object() for _ in range(4))
    assert eng.plan_groups(None, [a, b]) is None
    assert eng.plan_groups(2, [a, b, c]) == [(0, 1), (2,)]
    # Listed objects not among the candidates are dropped; unlisted ones go alone.
    assert eng.plan_groups([[c, a], [object()]], [a, b, c, d]) == [(2, 0), (1,), (3,)]
    is_obj = lambda t: not isinstance(t, int)  # noqa: E731
    assert eng.check_groups(0, is_obj, "obj") is None
    for bad in (-1, True, "x"):
        with pytest.raises(ValueError, match="non-negative integer"):
            eng.check_groups(bad, is_obj, "obj")
    with pytest.raises(ValueError, match="must consist of obj"):
        eng.check_groups([[1]], is_obj, "obj")
    with pytest.raises(ValueError, match="only appear once"):
        eng.check_groups([[a], [a]], is_obj, "obj")
    with pytest.warns(DeprecationWarning):
        assert eng.fold_num_groups(None, 3) == 3
    with pytest.warns(DeprecationWarning):
        assert eng.fold_num_groups(2, 3) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert eng.fold_num_groups(None, 0) is None


def test_checked_names():
    a, b = object(), object()
    assert eng.checked_names([a, b], None) == [("noname.0", a), ("noname.1", b)]
    assert eng.checked_names([a, b], [("x", a), ("y", b)]) == [("x", a), ("y", b)]
    with pytest.raises(ValueError, match="sequence of tuples"):
        eng.checked_names([a], [a])
    with pytest.raises(ValueError, match="unique. Found duplicates: x"):
        eng.checked_names([a, b], [("x", a), ("x", b)])
    with pytest.raises(ValueError, match="not named"):
        eng.checked_names([a, b], [("x", a)])


def test_semisync_schedule():
    s = SemiSyncSchedule(2, 0, 0)
    steps = [s.next_step() for _ in range(4)]
    assert steps == [(STALE, "stale0"), (STALE, "stale1"), (STALE, "stale2"), (STALE, "stale0")]
    assert s.submitted("e0") == [] and s.submitted("e1") == []
    assert s.submitted("e2") == ["e0"] and s.pending
    assert s.drain() == ["e1", "e2"] and not s.pending
    assert s.next_step() == (STALE, "stale0")  # the tags start over after a drain
    s = SemiSyncSchedule(0, 2, 1)
    assert [s.next_step() for _ in range(5)] == [(WARMUP, "warmup"), (LOCAL, False),
                                                 (LOCAL, True), (LOCAL, False), (LOCAL, True)]
    assert s.steps == 5
    with pytest.raises(ValueError, match="cannot both be set"):
        SemiSyncSchedule(1, 1, 0)
    for bad in ((-1, 0, 0), (0, -1, 0), (0, 1, 1.5)):
        with pytest.raises(ValueError, match="non-negative integer"):
            SemiSyncSchedule(*bad)


def test_engine_imports_no_framework():
    """The engine modules stay framework-free: importing them (and the package) loads
    neither torch nor tensorflow."""
    code = ("import sys, horovod_cpp._gradients, horovod_cpp._semisync; "
            "print(sorted(m for m in ('torch', 'tensorflow', 'keras') if m in sys.modules))")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_"))}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
