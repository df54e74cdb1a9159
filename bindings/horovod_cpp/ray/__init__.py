"""horovod_cpp on a Ray cluster: ``from horovod_cpp.ray import RayExecutor`` (was:
``from horovod.ray import RayExecutor``).

The workers are Ray actors running under the Gloo controller (no mpirun, no ssh): the
executor serves the rendezvous store from the driver and gives each actor its place.
ElasticRayExecutor runs an elastic job (workers lost or added as Ray's nodes change).
ray_logger.log() sends dicts from the workers to the callbacks given to run(), as Horovod's.
docs/running.md, "Ray", shows a job on a laptop and on a multi-node cluster.

Ray is optional: ``import horovod_cpp`` never needs it, this module does.
"""

try:
    import ray  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("horovod_cpp.ray needs Ray, which is not installed: "
                      "pip install 'horovod_cpp[ray]' (or pip install ray)") from e

from . import ray_logger
from .elastic import ElasticRayExecutor, ElasticSettings, RayHostDiscovery
from .executor import RayExecutor, Settings, WorkerError

__all__ = ["ElasticRayExecutor", "ElasticSettings", "RayExecutor", "RayHostDiscovery", "Settings",
           "WorkerError", "ray_logger"]
