"""horovod_cpp.elastic: elastic training (a job that loses or gains workers goes on), the
framework-free part of Horovod's elastic API. The frameworks' states live in
horovod_cpp.torch.elastic, horovod_cpp.tensorflow.elastic and horovod_cpp.keras.elastic; see
docs/training.md ("Elastic training")."""

from .._basics import HorovodInternalError
from .loop import reset, run, run_fn
from .state import HostsUpdatedInterrupt, ObjectState, State

__all__ = ["HorovodInternalError", "HostsUpdatedInterrupt", "ObjectState", "State", "reset",
           "run", "run_fn"]
