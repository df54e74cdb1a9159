"""Gradient compression applied around allreduce (as horovod.torch.Compression)."""

import torch

from .._compression import Compressor, HalfCompressorBase, NoneCompressor

__all__ = ["Compression", "Compressor", "FP16Compressor", "NoneCompressor"]


class FP16Compressor(HalfCompressorBase):
    """Sends floating-point tensors as float16 and casts the result back."""

    half = torch.float16

    @staticmethod
    def is_float(dtype):
        return dtype.is_floating_point

    @staticmethod
    def cast(tensor, dtype):
        return tensor.type(dtype)


class Compression:
    """Compression algorithms: Compression.none, Compression.fp16."""

    none = NoneCompressor
    fp16 = FP16Compressor
