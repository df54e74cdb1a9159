"""The TensorFlow glue of the gradient engine (.._gradients), shared by
DistributedGradientTape, the tf.compat.v1 DistributedOptimizer and the Keras
DistributedOptimizer: the tensor ops (collectives build ops; waiting is trivial) and
GradientReducer, which hands a list of gradients to the engine."""

import tensorflow as tf

from .._basics import Average, global_process_set
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

    def reduce(self, grads, variables=None):
        """The reduced gradients, in order (variables: needed when groups lists them)."""
        out = list(grads)
        present = [i for i, g in enumerate(out) if g is not None]
        groups = self.options.groups
        if isinstance(groups, list) and variables is None:
            raise ValueError("groups given as lists of variables need the variables")
        keys = [variables[i] for i in present] if variables is not None else present
        engine = GradientEngine(TensorFlowGradOps, self.options, len(present),
                                groups=plan_groups(groups, keys))
        dense_or_sparse = [out[i] if isinstance(out[i], tf.IndexedSlices)
                           else tf.convert_to_tensor(out[i]) for i in present]
        for i, r in zip(present, engine.reduce(dense_or_sparse)):
            out[i] = r
        return out
