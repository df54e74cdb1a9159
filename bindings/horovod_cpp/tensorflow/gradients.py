"""The TensorFlow glue of the gradient engine (.._gradients), shared by
DistributedGradientTape, the tf.compat.v1 DistributedOptimizer and the Keras
DistributedOptimizer: the tensor ops (collectives build ops; waiting is trivial) and
GradientReducer, which hands a list of gradients to the engine."""

import tensorflow as tf

from .._basics import Adasum, Average, global_process_set, size
from .._gradients import (GradientEngine, ReduceOptions, check_groups, fold_num_groups,
                          plan_groups)
from .compression import Compression
from .functions import allreduce, grouped_allreduce


class TensorFlowGradOps:
    """Gradients are tensors or tf.IndexedSlices; every collective returns its output."""

    @staticmethod
    def is_sparse(g):
        return isinstance(g, tf.IndexedSlices)

    @staticmethod
    def densify(g):
        return tf.convert_to_tensor(g), None

    @staticmethod
    def restore(dense, layout):
        # sparse_as_dense hands dense gradients to the optimizer, as Horovod does.
        return dense

    # Horovod's allreduce: dense tensors reduced, IndexedSlices gathered.
    allreduce = staticmethod(allreduce)
    grouped_allreduce = staticmethod(grouped_allreduce)
    sparse_allreduce = staticmethod(allreduce)

    @staticmethod
    def wait(outputs):
        return outputs

    wait_group = wait_sparse = wait


def _is_variable(v):
    return hasattr(v, "dtype") and hasattr(v, "shape")


class GradientReducer:
    """Holds Horovod's options and reduces a list of gradients (None stays None)."""

    def __init__(self, compression=Compression.none, sparse_as_dense=False, op=Average,
                 gradient_predivide_factor=1.0, num_groups=0, groups=None,
                 process_set=global_process_set):
        groups = check_groups(fold_num_groups(groups, num_groups), _is_variable, "tf.Variable")
        self.options = ReduceOptions(op=op, gradient_predivide_factor=gradient_predivide_factor,
                                     compression=compression, sparse_as_dense=sparse_as_dense,
                                     groups=groups, process_set=process_set)
        # Without groups every gradient of a step goes in one grouped allreduce, except with
        # Adasum, whose result depends on how the tensors are cut (each one is its own vector).
        self._group_all = op != Adasum

    def included(self):
        """Whether this rank belongs to the process set (outside it gradients stay local, as in
        Horovod)."""
        ps = self.options.process_set
        return ps is None or ps.process_set_id == 0 or bool(ps.included())

    def set_size(self):
        ps = self.options.process_set
        return size() if ps is None or ps.process_set_id == 0 else ps.size()

    def reduce(self, grads, variables=None):
        """The reduced gradients, in order (variables: needed when groups lists them); on a
        rank outside the process set, the gradients as they are. Without groups (and op not
        Adasum) the dense ones are reduced by one grouped allreduce, the same values as one
        allreduce each."""
        out = list(grads)
        if not self.included():
            return out
        present = [i for i, g in enumerate(out) if g is not None]
        groups = self.options.groups
        if isinstance(groups, list) and variables is None:
            raise ValueError("groups given as lists of variables need the variables")
        keys = [variables[i] for i in present] if variables is not None else present
        plan = plan_groups(groups, keys)
        if plan is None and self._group_all and present:
            # One grouped op (per dtype) for every dense gradient of the step: one TF kernel
            # and one negotiated unit instead of one of each per tensor. Sparse gradients are
            # still gathered on their own (the engine's _start_group does that).
            plan = [tuple(range(len(present)))]
        engine = GradientEngine(TensorFlowGradOps, self.options, len(present), groups=plan)
        dense_or_sparse = [out[i] if isinstance(out[i], tf.IndexedSlices)
                           else tf.convert_to_tensor(out[i]) for i in present]
        for i, r in zip(present, engine.reduce(dense_or_sparse)):
            out[i] = r
        return out


class LocalVariables:
    """The variables whose gradients stay local (register_local_source/register_local_var),
    keyed by identity (Keras 3 variables have no .ref()), and the reduction of a gradient list
    around them: local ones divided by the set's size when scale_local_gradients is True."""

    def __init__(self, reducer, scale_local_gradients):
        self._reducer = reducer
        self._scale = scale_local_gradients
        self._vars = {}  # id -> the variable, held so that its id stays its own

    def register(self, var):
        self._vars[id(var)] = var

    def is_local(self, var):
        return id(var) in self._vars

    def reduce(self, grads, variables):
        """The gradients of `variables`: the non-local ones reduced, the local ones kept."""
        out = list(grads)
        if not self._reducer.included():
            return out
        local = [self.is_local(v) for v in variables]
        idx = [i for i, is_local in enumerate(local) if not is_local]
        reduced = self._reducer.reduce([out[i] for i in idx], [variables[i] for i in idx])
        for i, r in zip(idx, reduced):
            out[i] = r
        if self._scale:
            n = self._reducer.set_size()
            for i, is_local in enumerate(local):
                if is_local and out[i] is not None:
                    out[i] = out[i] / n
        return out
