"""horovod_cpp.torch.elastic: Horovod's elastic API for PyTorch (`hvd.elastic.run`,
TorchState, ElasticSampler), on the elastic driver of hvdrun. See docs/training.md."""

from ...elastic import (HorovodInternalError, HostsUpdatedInterrupt, ObjectState, State, run,
                        run_fn)
from .sampler import ElasticSampler
from .state import TorchState

__all__ = ["ElasticSampler", "HorovodInternalError", "HostsUpdatedInterrupt", "ObjectState",
           "State", "TorchState", "run", "run_fn"]
