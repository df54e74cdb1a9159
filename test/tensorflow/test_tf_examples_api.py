"""Names that Horovod's own TensorFlow/Keras example programs call, on every module they import
(horovod_cpp.tensorflow, horovod_cpp.tensorflow.keras, horovod_cpp.keras), with Horovod's
answers. See docs/tensorflow.md, "Horovod's example programs, run here with the import
swapped"."""

import horovod_cpp.keras as hvd_keras
import horovod_cpp.tensorflow as hvd
import horovod_cpp.tensorflow.keras as hvd_tf_keras
import pytest

MODULES = [hvd, hvd_tf_keras, hvd_keras]
BUILD_FLAGS = ["mpi_built", "mpi_enabled", "mpi_threads_supported", "gloo_built",
               "gloo_enabled", "nccl_built", "ddl_built", "ccl_built", "cuda_built",
               "rocm_built", "sycl_built", "is_homogeneous"]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_sycl_built_chooses_the_gpu_device(module):
    # examples/tensorflow2/tensorflow2_keras_synthetic_benchmark.py, run without --no-cuda:
    #   device_name = 'XPU' if hvd.sycl_built() else 'GPU'
    assert module.sycl_built() is False
    device_name = 'XPU' if module.sycl_built() else 'GPU'
    assert device_name == 'GPU'
    # The same answer on every rank.
    assert hvd.allgather_object(device_name) == ['GPU'] * hvd.size()


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_build_flags_in_every_module(module):
    # Horovod's horovod.tensorflow.keras re-exports horovod.tensorflow's build and
    # environment queries; each module answers as horovod_cpp.tensorflow does.
    for name in BUILD_FLAGS:
        assert hasattr(module, name), f"{module.__name__}.{name} is missing"
        assert getattr(module, name)() == getattr(hvd, name)(), name
    assert module.rank() == hvd.rank() and module.size() == hvd.size()
