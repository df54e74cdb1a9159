"""DistributedOptimizer for Keras 3 optimizers (TensorFlow backend)."""

from ..._basics import Adasum, Average, Sum, global_process_set
from ..compression import Compression
from ..gradient_tape import local_layer_weights
from ..gradients import GradientReducer, LocalVariables


def _check_not_xla():
    """The collectives are TensorFlow kernels with no XLA lowering: fail at trace time, on
    every rank, with what to change, rather than in the XLA compiler."""
    import tensorflow as tf
    from tensorflow.python.ops import control_flow_util
    graph = tf.compat.v1.get_default_graph()
    if control_flow_util.GraphOrParentsInXlaContext(graph):
        raise ValueError(
            "horovod_cpp.keras.DistributedOptimizer: the train step is being compiled with XLA, "
            "which cannot run horovod_cpp's collectives. Compile the model with "
            "model.compile(..., jit_compile=False) (or leave tf.function(jit_compile=...) off).")


class _DistributedOptimizer:
    """Mixed into the wrapped optimizer's class by DistributedOptimizer()."""

    def _hvd_setup(self, reducer, backward_passes_per_step, average_aggregated_gradients,
                   scale_local_gradients=True):
        self._hvd_reducer = reducer
        self._hvd_local = LocalVariables(reducer, scale_local_gradients)
        self._hvd_bpps = int(backward_passes_per_step)
        self._hvd_average_aggregated = bool(average_aggregated_gradients)

    def register_local_var(self, var):
        """Gradients of `var` stay local (not reduced); divided by the set's size when
        scale_local_gradients is True, as in Horovod."""
        self._hvd_local.register(var)

    def apply(self, grads, trainable_variables=None):
        """Reduces the gradients across ranks, then applies them (with
        backward_passes_per_step > 1: every k-th call, see _backend_update_step)."""
        _check_not_xla()
        if self._hvd_bpps == 1:
            variables = (list(trainable_variables) if trainable_variables is not None
                         else list(self._trainable_variables))
            grads = self._hvd_local.reduce(list(grads), variables)
        return super(self._hvd_base, self).apply(grads, trainable_variables)

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        if self._hvd_bpps > 1:
            # Keras has averaged the k local gradients; Horovod's default sums them.
            grads = self._hvd_local.reduce(list(grads), list(trainable_variables))
            if not self._hvd_average_aggregated:
                grads = [None if g is None else g * self._hvd_bpps for g in grads]
        return super(self._hvd_base, self)._backend_update_step(grads, trainable_variables,
                                                                learning_rate)


def _wrap_in_place(optimizer, reducer, backward_passes_per_step, average_aggregated_gradients,
                   scale_local_gradients=True):
    base = optimizer.__class__
    if getattr(base, "_hvd_wrapped", False):
        raise ValueError("horovod_cpp: this optimizer is already a DistributedOptimizer")
    attrs = {k: v for k, v in _DistributedOptimizer.__dict__.items()
             if k not in ("__dict__", "__weakref__")}
    # Serialized under the base class's name and module, so a saved model loads anywhere
    # (horovod_cpp.keras.load_model wraps its optimizer again).
    attrs.update(__module__=base.__module__, __qualname__=base.__qualname__, _hvd_wrapped=True,
                 _hvd_base=None)
    cls = type(base.__name__, (base,), attrs)
    cls._hvd_base = cls
    optimizer.__class__ = cls
    optimizer._hvd_setup(reducer, backward_passes_per_step, average_aggregated_gradients,
                         scale_local_gradients)
    return optimizer


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=Average, backward_passes_per_step=1,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """Returns a copy of the Keras optimizer `optimizer` (same class and configuration) whose
    gradients are reduced across ranks (averaged by default) before they are applied.

    backward_passes_per_step=k accumulates k local gradients (Keras's gradient accumulation)
    and reduces and applies them every k-th step: summed, or averaged with
    average_aggregated_gradients=True, as in Horovod. op=Adasum (which Horovod's Keras optimizer
    refuses) reduces the gradients by Adasum, not divided by the size."""
    if op not in (Average, Sum, Adasum):
        raise ValueError("horovod_cpp.keras.DistributedOptimizer supports op=Average, op=Sum "
                         "and op=Adasum")
    if backward_passes_per_step < 1:
        raise ValueError("backward_passes_per_step must be >= 1")
    reducer = GradientReducer(compression=compression, sparse_as_dense=sparse_as_dense, op=op,
                              gradient_predivide_factor=gradient_predivide_factor,
                              num_groups=num_groups, groups=groups, process_set=process_set)
    config = optimizer.get_config()
    if name is not None:
        config["name"] = name
    if backward_passes_per_step > 1:
        config["gradient_accumulation_steps"] = int(backward_passes_per_step)
    copy = optimizer.__class__.from_config(config)
    return _wrap_in_place(copy, reducer, backward_passes_per_step, average_aggregated_gradients,
                          scale_local_gradients)


def PartialDistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                                compression=Compression.none, sparse_as_dense=False,
                                gradient_predivide_factor=1.0, op=Average,
                                backward_passes_per_step=1, average_aggregated_gradients=False,
                                groups=None, process_set=global_process_set, local_layers=None,
                                scale_local_gradients=True):
    """DistributedOptimizer whose gradients of the weights of `local_layers` (a Keras layer or
    a list of them) stay local, as registered with register_local_var."""
    opt = DistributedOptimizer(
        optimizer, name=name, compression=compression, sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor, op=op,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients, groups=groups,
        process_set=process_set, scale_local_gradients=scale_local_gradients)
    for var in local_layer_weights(local_layers):
        opt.register_local_var(var)
    return opt
