"""The NumPy reference of Adasum the Python tests (numpy, torch, TensorFlow) check against:
every rank computes it itself, in double, from every rank's input."""

import numpy as np


def combine(a, b):
    """(1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b in double; a zero vector takes 1."""
    dot, aa, bb = float(a @ b), float(a @ a), float(b @ b)
    ca = 1 - dot / (2 * aa) if aa > 0 else 1.0
    cb = 1 - dot / (2 * bb) if bb > 0 else 1.0
    return ca * a + cb * b


def reference(arrays):
    """Adasum of the ranks' arrays in the documented order (docs/training.md, "Adasum"): with
    P the largest power of two <= n, rank P + j first folds into rank j; then slot i takes
    slot i + d for d = 1, 2, ..., P / 2."""
    slots = [np.asarray(a, dtype=np.float64).ravel() for a in arrays]
    p = 1
    while p * 2 <= len(slots):
        p *= 2
    for j in range(len(slots) - p):
        slots[j] = combine(slots[j], slots[p + j])
    d = 1
    while d < p:
        for i in range(0, p, 2 * d):
            slots[i] = combine(slots[i], slots[i + d])
        d *= 2
    return slots[0].reshape(np.shape(arrays[0]))


def assert_close(got, want, rtol):
    """Every element within rtol of the result's largest magnitude (at least 1): each level
    of the tree rounds to the tensor's dtype."""
    got = np.asarray(got, dtype=np.float64)
    np.testing.assert_allclose(got, want, rtol=0, atol=rtol * max(1.0, float(np.abs(want).max())))
