"""Gradient compression around allreduce (horovod.tensorflow.Compression)."""

import tensorflow as tf

from .._compression import Compressor, HalfCompressorBase, NoneCompressor

__all__ = ["Compression", "Compressor", "FP16Compressor", "NoneCompressor"]


class FP16Compressor(HalfCompressorBase):
    """Sends floating-point tensors as float16 and casts the result back."""

    half = tf.float16

    @staticmethod
    def is_float(dtype):
        return dtype.is_floating

    @staticmethod
    def cast(tensor, dtype):
        return tf.cast(tensor, dtype)


class Compression:
    """Compression algorithms: Compression.none, Compression.fp16."""

    none = NoneCompressor
    fp16 = FP16Compressor
