"""horovod.tensorflow's SyncBatchNormalization on Keras 3: a BatchNormalization layer whose
training-mode moments are those of the batches of every rank of a process set together."""

import keras
import tensorflow as tf

from .._basics import Sum, global_process_set
from .mpi_ops import _allreduce, _set_size_of


# Registered so that keras.models.load_model finds the class without custom_objects.
@keras.saving.register_keras_serializable(package="horovod_cpp")
class SyncBatchNormalization(keras.layers.BatchNormalization):
    """keras.layers.BatchNormalization (same arguments, same moving-statistics update) whose
    training-mode mean and variance cover every rank of `process_set`: one allreduce (Sum) of
    the per-channel element count, sum and sum of squares, accumulated in float64 so the
    variance they give loses nothing to cancellation at float32 scales. Per-rank batch sizes
    may differ (a mask is honoured). The allreduce has a gradient, so backpropagation also
    spans the ranks: the input gradient is that of one layer over the concatenated batch.
    Inference mode and a set of one rank do not communicate. Keras's own `synchronized`
    (tf.distribute) is not used. Works eagerly and in tf.function (model.fit). `process_set`
    is not part of the layer's config (a set is registered per job): a layer restored from a
    saved model uses the global set."""

    def __init__(self, *args, process_set=global_process_set, **kwargs):
        kwargs.pop("synchronized", None)
        super().__init__(*args, **kwargs)
        self.process_set = process_set

    def _moments(self, inputs, mask):
        if _set_size_of(self.process_set) == 1:
            return super()._moments(inputs, mask)
        x = tf.cast(inputs, tf.float64)
        axes = self._reduction_axes
        if mask is None:
            sums = tf.reduce_sum(x, axes)
            squares = tf.reduce_sum(tf.square(x), axes)
            per_channel = tf.cast(tf.size(x), tf.float64) / tf.cast(tf.size(sums), tf.float64)
            counts = tf.fill(tf.shape(sums), per_channel)
        else:
            weights = tf.cast(tf.broadcast_to(tf.expand_dims(mask, -1), tf.shape(x)),
                              tf.float64)
            sums = tf.reduce_sum(x * weights, axes)
            squares = tf.reduce_sum(tf.square(x) * weights, axes)
            counts = tf.reduce_sum(weights, axes)
        shape = tf.shape(sums)
        local = tf.concat([tf.reshape(counts, [-1]), tf.reshape(sums, [-1]),
                           tf.reshape(squares, [-1])], axis=0)
        total = tf.reshape(_allreduce(local, op=Sum, process_set=self.process_set), [3, -1])
        mean = total[1] / total[0]
        variance = tf.maximum(total[2] / total[0] - tf.square(mean), 0.0)
        return (tf.cast(tf.reshape(mean, shape), inputs.dtype),
                tf.cast(tf.reshape(variance, shape), inputs.dtype))

