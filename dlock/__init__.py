"""Not the dlock Python client: the project's root is where make leaves the
extension's dlock.so, which Python started here would import as module
dlock and fail on (ImportError: undefined symbol).  This package, found
first, loads the client from the rest of sys.path instead: the one pip
installed (pip install ./clients/python; distribution dlock-pg)."""

import importlib.machinery
import importlib.util
import os
import sys

_root = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
_path = [p for p in sys.path if os.path.realpath(p or os.curdir) != _root]
_spec = importlib.machinery.PathFinder.find_spec(__name__, _path)
if _spec is None or _spec.loader is None:
    raise ImportError("the dlock Python client is not installed (pip install ./clients/python); "
                      "this directory is dlock's source tree", name=__name__)
_client = importlib.util.module_from_spec(_spec)
# The import statement returns what sys.modules holds once this file ran.
sys.modules[__name__] = _client
_spec.loader.exec_module(_client)
