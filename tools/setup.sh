#!/usr/bin/env bash
# Installs every Debian package Tessera needs (skipping what is present), then configures
# and builds the project with CMake. Idempotent: a second run installs nothing and only
# rebuilds what changed.
#
#   tools/setup.sh              install packages, configure and build into build/
#   TESSERA_BUILD_DIR=dir       build somewhere else
#   TESSERA_CMAKE_ARGS="..."    extra arguments for the configure step (-DTESSERA_SANITIZE=ON)
#   TESSERA_JOBS=n              parallel build jobs (default: all cores)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${TESSERA_BUILD_DIR:-$repo/build}

packages=(
  build-essential cmake ccache pkg-config
  libdnnl-dev
  # Debian's oneDNN is built with its OpenCL GPU runtime: its CMake package needs these.
  ocl-icd-opencl-dev opencl-headers
  libopenblas-openmp-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  zlib1g-dev
  libcli11-dev nlohmann-json3-dev libhdf5-dev
  # Image folders (data/Image.h): JPEG and PNG decoding.
  libjpeg62-turbo-dev libpng-dev
  # Data-parallel training across processes (distributed/): Open MPI.
  libopenmpi-dev openmpi-bin
  # ONNX import (io/Onnx.h) and its conformance tests (ONNX's own test cases).
  libonnx-dev libprotobuf-dev protobuf-compiler libonnx-testdata python3-onnx
  # The Python package (python/): pybind11 builds it for Debian's python3, NumPy arrays go
  # in and out, and pytest runs its suite (python/tests).
  pybind11-dev python3-dev python3-numpy python3-pytest
  # `pip install .` (setup.py builds through CMake; offline with --no-build-isolation).
  python3-pip python3-setuptools python3-wheel
  # lint.python checks the Python scripts.
  pyflakes3
  # The HDF5 interoperability tests read and write model files with h5py; the data tests
  # write images with Pillow.
  python3-h5py python3-pil
  # tools/bundle.sh: relocatable tarballs (RUNPATHs of the copied libraries, xz).
  patchelf xz-utils
  # tessera train --plot draws the curves with gnuplot.
  gnuplot-nox
  # tessera draw -o model.png renders with Graphviz.
  graphviz
  # tools/api_reference.sh: the C++ API reference from the headers.
  doxygen
  # The lint.formatted test checks the tree against .clang-format.
  clang-format
  # tools/fuzz.sh: the readers' libFuzzer harnesses build with clang (libFuzzer, OpenMP).
  clang libclang-rt-14-dev libomp-dev
  # PyTorch: networks exported by torch.onnx.export are checked against its outputs
  # (tests/io/torchvision_onnx.py), and tools/bench/pytorch_side_by_side.py compares speed.
  python3-torch python3-torchvision
  # Fashion-MNIST under /usr/share/datasets/fashion-mnist: the default training data.
  dataset-fashion-mnist
  # English text for character-level language models (tessera train --data fortunes).
  fortunes
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "[setup] installing: ${missing[*]}"
  as_root=()
  if [[ $(id -u) -ne 0 ]]; then as_root=(sudo); fi
  "${as_root[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "[setup] all ${#packages[@]} packages present"
fi

jobs=${TESSERA_JOBS:-$(nproc)}
echo "[setup] configuring and building in $build with $jobs jobs"
# shellcheck disable=SC2086
cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release ${TESSERA_CMAKE_ARGS:-}
cmake --build "$build" -j "$jobs"

# `import tessera` for Debian's python3: a .pth file in its site-packages names the
# build's python/ directory (the default build only; another build dir is left alone).
if [[ -z ${TESSERA_BUILD_DIR:-} && -d $build/python/tessera ]]; then
  site=$(/usr/bin/python3 -c "import site; print(site.getsitepackages()[0])")
  pth="$site/tessera.pth"
  if [[ ! -f $pth || $(cat "$pth") != "$build/python" ]]; then
    as_root=()
    if [[ $(id -u) -ne 0 ]]; then as_root=(sudo); fi
    "${as_root[@]}" mkdir -p "$site"
    echo "$build/python" | "${as_root[@]}" tee "$pth" >/dev/null
    echo "[setup] /usr/bin/python3 imports tessera from $build/python ($pth)"
  fi
fi
