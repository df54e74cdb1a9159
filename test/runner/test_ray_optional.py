"""Ray is optional: horovod_cpp imports without it, and horovod_cpp.ray says how to get it.

Ray is hidden from a fresh interpreter (None in sys.modules makes `import ray` fail), so these
run whether or not Ray is installed; the RayExecutor's own tests are in test/ray.
"""

import subprocess
import sys

HIDE_RAY = "import sys; sys.modules['ray'] = None; "


def run_python(code):
    return subprocess.run([sys.executable, "-c", HIDE_RAY + code], capture_output=True,
                          text=True, timeout=120)


def test_package_imports_without_ray():
    proc = run_python("import horovod_cpp, horovod_cpp.runner; print('ok')")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_ray_module_names_the_extra():
    proc = run_python("import horovod_cpp.ray")
    assert proc.returncode != 0
    assert "ImportError: horovod_cpp.ray needs Ray" in proc.stderr, proc.stderr
    assert "pip install 'horovod_cpp[ray]'" in proc.stderr, proc.stderr
