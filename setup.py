"""`pip install .`: configures and builds Tessera with CMake, then installs CMake's `python`
component (the package directory tessera/: the Python files, the _tessera extension,
libtessera and the programs beside it) into the wheel.

Environment:
  TESSERA_BUILD_DIR   an existing CMake build directory to build in and install from
                      (default: build/pip/cmake, configured here on first use)
  TESSERA_CMAKE_ARGS  extra arguments for that first configure (-DTESSERA_USE_CUDA=OFF, ...)
  TESSERA_JOBS        parallel build jobs (default: the CPU count)
"""

import os
import shlex
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeBuild(build_ext):
    """Builds the package with CMake: the one extension stands for all of it."""

    def run(self):
        build = Path(os.environ.get("TESSERA_BUILD_DIR") or ROOT / "build" / "pip" / "cmake").resolve()
        if not (build / "CMakeCache.txt").exists():
            args = ["cmake", "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                    f"-DPython_EXECUTABLE={sys.executable}", "-DTESSERA_BUILD_TESTS=OFF",
                    "-DTESSERA_BUILD_BENCHMARKS=OFF"]
            self._run(args + shlex.split(os.environ.get("TESSERA_CMAKE_ARGS", "")))
        jobs = os.environ.get("TESSERA_JOBS") or str(os.cpu_count() or 1)
        self._run(["cmake", "--build", str(build), "--target", "tessera_python", "-j", jobs])
        self._run(["cmake", "--install", str(build), "--component", "python", "--prefix",
                   str(Path(self.build_lib).resolve())])

    def _run(self, args):
        print("[tessera]", " ".join(args), flush=True)
        subprocess.run(args, check=True)


setup(
    packages=[],
    ext_modules=[Extension("tessera._tessera", sources=[])],  # CMake builds it (and the rest)
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": "build/pip"}, "egg_info": {"egg_base": "build/pip"}},
)
