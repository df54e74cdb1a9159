"""horovod_cpp.keras.elastic: the same module as horovod_cpp.tensorflow.keras.elastic."""

from ..tensorflow.keras.elastic import *  # noqa: F401,F403
from ..tensorflow.keras.elastic import (CommitStateCallback, KerasState,
                                        UpdateBatchStateCallback, UpdateEpochStateCallback,
                                        run)
