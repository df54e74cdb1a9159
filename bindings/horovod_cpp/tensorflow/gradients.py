"""Averaging a list of gradients the way Horovod does, shared by DistributedGradientTape, the
tf.compat.v1 DistributedOptimizer and the Keras DistributedOptimizer."""

import tensorflow as tf

from .._basics import Adasum, Average, Sum, global_process_set
from .compression import Compression
from .functions import allreduce, grouped_allreduce
from .mpi_ops import _set_size_of


class GradientReducer:
    """Holds Horovod's options and reduces a list of gradients (None stays None)."""

    def __init__(self, compression=Compression.none, sparse_as_dense=False, op=Average,
                 gradient_predivide_factor=1.0, num_groups=0, groups=None,
                 process_set=global_process_set):
        if op == Adasum:
            raise NotImplementedError("horovod_cpp: op=Adasum is not supported")
        if gradient_predivide_factor != 1.0 and op != Average:
            raise ValueError("gradient_predivide_factor not supported with op != Average")
        if groups is not None and num_groups:
            raise ValueError("pass either groups or num_groups, not both")
        if num_groups < 0:
            raise ValueError("num_groups must be >= 0")
        self.compression = compression
        self.sparse_as_dense = sparse_as_dense
        self.op = op
        self.predivide = float(gradient_predivide_factor)
        self.num_groups = int(num_groups)
        self.groups = groups
        self.process_set = process_set

    def _scales(self):
        """(op, prescale, postscale): Average with a predivide factor is a Sum scaled before
        by 1/f and after by f/size, as in Horovod."""
        if self.op == Average and self.predivide != 1.0:
            return Sum, 1.0 / self.predivide, self.predivide / _set_size_of(self.process_set)
        return self.op, 1.0, 1.0

    def reduce(self, grads, variables=None):
        """The reduced gradients, in order."""
        grads = list(grads)
        if self.sparse_as_dense:
            grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
                     for g in grads]
        op, pre, post = self._scales()
        present = [i for i, g in enumerate(grads) if g is not None]
        out = list(grads)
        groups = self._group_indices(present, variables)
        if groups is None:
            for i in present:
                out[i] = allreduce(grads[i], op=op, prescale_factor=pre, postscale_factor=post,
                                   compression=self.compression, process_set=self.process_set)
            return out
        for idx in groups:
            reduced = grouped_allreduce([grads[i] for i in idx], op=op, prescale_factor=pre,
                                        postscale_factor=post, compression=self.compression,
                                        process_set=self.process_set)
            for i, r in zip(idx, reduced):
                out[i] = r
        return out

    def _group_indices(self, present, variables):
        """None (one allreduce per gradient) or lists of gradient indices reduced together."""
        if self.num_groups:
            n = min(self.num_groups, max(len(present), 1))
            return [g for g in (present[k::n] for k in range(n)) if g]
        if self.groups is None:
            return None
        if isinstance(self.groups, int):
            n = min(self.groups, max(len(present), 1))
            return [g for g in (present[k::n] for k in range(n)) if g]
        if variables is None:
            raise ValueError("groups given as lists of variables need the variables")
        ref = {id(v): i for i, v in enumerate(variables)}
        seen, out = set(), []
        for group in self.groups:
            idx = [ref[id(v)] for v in group if id(v) in ref and ref[id(v)] in present]
            seen.update(idx)
            if idx:
                out.append(idx)
        out.extend([i] for i in present if i not in seen)
        return out
