"""python -m horovod_cpp.runner: the same as hvdrun."""
from . import run_commandline

run_commandline()
