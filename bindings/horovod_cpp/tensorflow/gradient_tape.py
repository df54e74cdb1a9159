"""DistributedGradientTape: a tf.GradientTape whose gradient() averages across ranks."""

import tensorflow as tf

from .._basics import Average, global_process_set, size
from .compression import Compression
from .gradients import GradientReducer


class _DistributedGradientTape(tf.GradientTape):
    """Mixed into the wrapped tape's class (see DistributedGradientTape)."""

    def _hvd_setup(self, reducer, scale_local_gradients):
        self._hvd_reducer = reducer
        self._hvd_scale_local = scale_local_gradients
        self._hvd_local_sources = set()

    def register_local_source(self, source):
        """Gradients of `source` stay local (not reduced); scaled by 1/size when
        scale_local_gradients is True, as in Horovod."""
        self._hvd_local_sources.add(source.ref())

    def gradient(self, target, sources, output_gradients=None, **kwargs):
        grads = super(self.__class__, self).gradient(target, sources, output_gradients,
                                                     **kwargs)
        flat_sources = tf.nest.flatten(sources)
        flat_grads = tf.nest.flatten(grads, expand_composites=False)
        local = [s.ref() in self._hvd_local_sources if hasattr(s, "ref") else False
                 for s in flat_sources]
        idx = [i for i, is_local in enumerate(local) if not is_local]
        reduced = self._hvd_reducer.reduce([flat_grads[i] for i in idx],
                                           [flat_sources[i] for i in idx])
        out = list(flat_grads)
        for i, r in zip(idx, reduced):
            out[i] = r
        if self._hvd_scale_local and any(local):
            for i, is_local in enumerate(local):
                if is_local and out[i] is not None:
                    out[i] = out[i] / size()
        return tf.nest.pack_sequence_as(grads, out)


def DistributedGradientTape(gradtape, device_dense="", device_sparse="",
                            compression=Compression.none, sparse_as_dense=False, op=Average,
                            gradient_predivide_factor=1.0, num_groups=0, groups=None,
                            process_set=global_process_set, scale_local_gradients=True):
    """Wraps a tf.GradientTape so that gradient() returns gradients reduced over the ranks
    (averaged by default). Options as in horovod.tensorflow: compression, sparse_as_dense
    (IndexedSlices are otherwise gathered), op, gradient_predivide_factor, num_groups/groups
    (fused groups of gradients), process_set, scale_local_gradients."""
    reducer = GradientReducer(compression=compression, sparse_as_dense=sparse_as_dense, op=op,
                              gradient_predivide_factor=gradient_predivide_factor,
                              num_groups=num_groups, groups=groups, process_set=process_set)
    cls = type(gradtape.__class__.__name__, (gradtape.__class__,),
               dict(_DistributedGradientTape.__dict__))
    gradtape.__class__ = cls
    gradtape._hvd_setup(reducer, scale_local_gradients)
    return gradtape
