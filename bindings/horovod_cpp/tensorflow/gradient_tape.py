"""DistributedGradientTape: a tf.GradientTape whose gradient() averages across ranks;
PartialDistributedGradientTape: the same with some layers' gradients kept local."""

import tensorflow as tf

from .._basics import Average, global_process_set
from .compression import Compression
from .gradients import GradientReducer, LocalVariables


class _DistributedGradientTape(tf.GradientTape):
    """Mixed into the wrapped tape's class (see DistributedGradientTape)."""

    def _hvd_setup(self, reducer, scale_local_gradients):
        self._hvd_reducer = reducer
        self._hvd_local = LocalVariables(reducer, scale_local_gradients)

    def register_local_source(self, source):
        """Gradients of `source` (a tf.Variable, a Keras 3 variable or a watched tensor) stay
        local (not reduced); divided by the set's size when scale_local_gradients is True, as
        in Horovod."""
        self._hvd_local.register(source)

    def gradient(self, target, sources, output_gradients=None, **kwargs):
        grads = super(self.__class__, self).gradient(target, sources, output_gradients,
                                                     **kwargs)
        flat_sources = tf.nest.flatten(sources)
        flat_grads = tf.nest.flatten(grads, expand_composites=False)
        out = self._hvd_local.reduce(flat_grads, flat_sources)
        return tf.nest.pack_sequence_as(grads, out)


def DistributedGradientTape(gradtape, device_dense="", device_sparse="",
                            compression=Compression.none, sparse_as_dense=False, op=Average,
                            gradient_predivide_factor=1.0, num_groups=0, groups=None,
                            process_set=global_process_set, scale_local_gradients=True):
    """Wraps a tf.GradientTape so that gradient() returns gradients reduced over the ranks
    (averaged by default). Options as in horovod.tensorflow: compression, sparse_as_dense
    (IndexedSlices are otherwise gathered), op, gradient_predivide_factor, num_groups/groups
    (fused groups of gradients), process_set (a rank outside it keeps its gradients local),
    scale_local_gradients."""
    reducer = GradientReducer(compression=compression, sparse_as_dense=sparse_as_dense, op=op,
                              gradient_predivide_factor=gradient_predivide_factor,
                              num_groups=num_groups, groups=groups, process_set=process_set)
    cls = type(gradtape.__class__.__name__, (gradtape.__class__,),
               dict(_DistributedGradientTape.__dict__))
    gradtape.__class__ = cls
    gradtape._hvd_setup(reducer, scale_local_gradients)
    return gradtape


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="",
                                   compression=Compression.none, sparse_as_dense=False,
                                   op=Average, gradient_predivide_factor=1.0, num_groups=0,
                                   groups=None, process_set=global_process_set,
                                   local_layers=None, scale_local_gradients=True):
    """DistributedGradientTape whose gradients of the weights of `local_layers` (a Keras layer
    or a list of them) stay local, as registered with register_local_source."""
    tape = DistributedGradientTape(
        gradtape, device_dense, device_sparse, compression, sparse_as_dense, op,
        gradient_predivide_factor, num_groups, groups, process_set, scale_local_gradients)
    for var in local_layer_weights(local_layers):
        tape.register_local_source(var)
    return tape


def local_layer_weights(local_layers):
    """Every trainable weight of `local_layers` (None, a Keras layer or a list of them)."""
    if local_layers is None:
        return []
    layers = local_layers if isinstance(local_layers, (list, tuple)) else [local_layers]
    out = []
    for layer in layers:
        if not hasattr(layer, "trainable_weights"):
            raise ValueError("local_layers must be Keras layers (or a list of them), got "
                             f"{type(layer).__name__}")
        out.extend(layer.trainable_weights)
    return out
