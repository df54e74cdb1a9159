"""The package's store client (bindings/horovod_cpp/runner/store_client.py), loaded by path.

Test workers run this folder's programs by path, without importing the package (whose import
loads the compiled module); the client itself is standard library only.
"""

import importlib.util
import os

_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bindings",
                     "horovod_cpp", "runner", "store_client.py")
_spec = importlib.util.spec_from_file_location("_hvd_store_client", _PATH)
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)

MAGIC, SET, GET, ADD, CHECK, STATUS = (_module.MAGIC, _module.SET, _module.GET, _module.ADD,
                                       _module.CHECK, _module.STATUS)
Client, request, read_response, recv_exact = (_module.Client, _module.request,
                                              _module.read_response, _module.recv_exact)
