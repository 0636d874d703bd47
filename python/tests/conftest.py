"""The suite tests the package built beside it (build/python, or TESSERA_PYTHON_PATH),
whatever else the interpreter would import as `tessera`."""

import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
_built = os.environ.get("TESSERA_PYTHON_PATH", os.path.join(_here, "..", "..", "build", "python"))
if os.path.isdir(os.path.join(_built, "tessera")):
    sys.path.insert(0, os.path.abspath(_built))
