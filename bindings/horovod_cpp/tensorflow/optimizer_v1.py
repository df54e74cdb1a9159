"""The tf.compat.v1 session style: DistributedOptimizer for tf.compat.v1.train optimizers and
BroadcastGlobalVariablesHook for MonitoredTrainingSession."""

import tensorflow as tf

from .._basics import Average, global_process_set
from .compression import Compression
from .functions import broadcast_global_variables
from .gradients import GradientReducer, LocalVariables


class _DistributedOptimizerV1(tf.compat.v1.train.Optimizer):
    """Averages gradients across ranks in compute_gradients(); everything else is the wrapped
    optimizer's."""

    def __init__(self, optimizer, name, use_locking, reducer, scale_local_gradients=True):
        if name is None:
            name = "Distributed{}".format(type(optimizer).__name__)
        super().__init__(name=name, use_locking=use_locking)
        self._optimizer = optimizer
        self._local = LocalVariables(reducer, scale_local_gradients)

    def register_local_var(self, var):
        """Gradients of `var` stay local (not reduced); divided by the set's size when
        scale_local_gradients is True, as in Horovod."""
        self._local.register(var)

    def compute_gradients(self, *args, **kwargs):
        gradients = self._optimizer.compute_gradients(*args, **kwargs)
        if not gradients:
            return gradients
        grads, variables = zip(*gradients)
        reduced = self._local.reduce(list(grads), list(variables))
        return list(zip(reduced, variables))

    def apply_gradients(self, *args, **kwargs):
        return self._optimizer.apply_gradients(*args, **kwargs)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


def DistributedOptimizerV1(optimizer, name=None, use_locking=False,
                           compression=Compression.none, sparse_as_dense=False,
                           backward_passes_per_step=1, op=Average,
                           gradient_predivide_factor=1.0, average_aggregated_gradients=False,
                           num_groups=0, groups=None, process_set=global_process_set,
                           scale_local_gradients=True):
    if backward_passes_per_step != 1:
        raise NotImplementedError(
            "horovod_cpp: backward_passes_per_step > 1 is provided for Keras optimizers "
            "(horovod_cpp.keras.DistributedOptimizer), not for tf.compat.v1 optimizers")
    reducer = GradientReducer(compression=compression, sparse_as_dense=sparse_as_dense, op=op,
                              gradient_predivide_factor=gradient_predivide_factor,
                              num_groups=num_groups, groups=groups, process_set=process_set)
    return _DistributedOptimizerV1(optimizer, name, use_locking, reducer, scale_local_gradients)


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """Broadcasts every global variable from root_rank once the session is created, so that
    every rank starts from the same weights (or the same restored checkpoint)."""

    def __init__(self, root_rank, device=""):
        super().__init__()
        self.root_rank = root_rank
        self.bcast_op = None
        self.device = device

    def begin(self):
        if not self.bcast_op or self.bcast_op.graph != tf.compat.v1.get_default_graph():
            self.bcast_op = broadcast_global_variables(self.root_rank)

    def after_create_session(self, session, coord):
        session.run(self.bcast_op)
