"""Gradient compression around allreduce, shared by the framework frontends.

horovod_cpp.torch.Compression and horovod_cpp.tensorflow.Compression (as in Horovod) are the
classes below with the framework's dtype test and cast filled in.
"""


class Compressor:
    """Interface: compress(tensor) -> (tensor, ctx); decompress(tensor, ctx) -> tensor."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class HalfCompressorBase(Compressor):
    """Sends floating-point tensors as float16 and casts the result back. A framework's
    subclass sets `half` (its float16 dtype) and defines is_float(dtype) and cast(tensor,
    dtype)."""

    half = None

    @staticmethod
    def is_float(dtype):
        raise NotImplementedError

    @staticmethod
    def cast(tensor, dtype):
        raise NotImplementedError

    @classmethod
    def compress(cls, tensor):
        if cls.is_float(tensor.dtype):
            return cls.cast(tensor, cls.half), tensor.dtype
        return tensor, tensor.dtype

    @classmethod
    def decompress(cls, tensor, ctx):
        if ctx is not None and cls.is_float(ctx) and tensor.dtype != ctx:
            return cls.cast(tensor, ctx)
        return tensor


def compression_for(half, is_float, cast):
    """(FP16Compressor, Compression) of a framework: `half` is its float16 dtype,
    is_float(dtype) tells floating-point dtypes, cast(tensor, dtype) converts."""
    fp16 = type("FP16Compressor", (HalfCompressorBase,), {
        "__doc__": HalfCompressorBase.__doc__.split(".")[0] + ".",
        "half": half, "is_float": staticmethod(is_float), "cast": staticmethod(cast)})

    class Compression:
        """Compression algorithms: Compression.none, Compression.fp16."""

        none = NoneCompressor

    Compression.fp16 = fp16
    return fp16, Compression
