"""Gradient compression around allreduce (horovod.tensorflow.Compression)."""

import tensorflow as tf

from .._compression import Compressor, NoneCompressor, compression_for

__all__ = ["Compression", "Compressor", "FP16Compressor", "NoneCompressor"]

FP16Compressor, Compression = compression_for(tf.float16, lambda d: d.is_floating, tf.cast)
FP16Compressor.__module__ = Compression.__module__ = __name__
