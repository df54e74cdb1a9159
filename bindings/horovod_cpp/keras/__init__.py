"""horovod_cpp.keras: the same module as horovod_cpp.tensorflow.keras (Keras 3, TensorFlow
backend)."""

from ..tensorflow.keras import *  # noqa: F401,F403
from . import elastic
from ..tensorflow.keras import (DistributedOptimizer, PartialDistributedOptimizer,
                                SyncBatchNormalization,
                                broadcast_global_variables, callbacks, load_model)
