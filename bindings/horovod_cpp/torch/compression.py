"""Gradient compression applied around allreduce (as horovod.torch.Compression)."""

import torch

from .._compression import Compressor, NoneCompressor, compression_for

__all__ = ["Compression", "Compressor", "FP16Compressor", "NoneCompressor"]

FP16Compressor, Compression = compression_for(torch.float16, lambda d: d.is_floating_point,
                                              lambda t, d: t.type(d))
FP16Compressor.__module__ = Compression.__module__ = __name__
