#!/usr/bin/env bash
# The API reference, generated: the C++ headers through Doxygen (their /// comments) and the
# Python package through pydoc (its docstrings: every layer class with its arguments and
# defaults, the costs, optimizers, data sets, tessera.puzzlelib).
#   tools/api_reference.sh [OUT [PYTHONPATH]]   (default build/api and build/python)
# Open OUT/index.html.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-$root/build/api}" && cd "${1:-$root/build/api}" && pwd)
pythonpath=${2:-$root/build/python}
command -v doxygen > /dev/null || { echo "doxygen is not installed (tools/setup.sh installs it)" >&2; exit 1; }
rm -rf "$out/cpp" "$out/python"
mkdir -p "$out/cpp" "$out/python"
{
    echo "PROJECT_NAME = Tessera"
    echo "PROJECT_BRIEF = \"C++ neural-network layers and graph containers\""
    echo "INPUT = $root/backend $root/containers $root/modules $root/training $root/data $root/io $root/distributed $root/models $root/tessera"
    echo "FILE_PATTERNS = *.h"
    echo "RECURSIVE = YES"
    echo "EXCLUDE_PATTERNS = */backend/cpu/* */io/onnx/*"
    echo "EXTRACT_ALL = YES"
    echo "JAVADOC_AUTOBRIEF = YES"
    echo "GENERATE_LATEX = NO"
    echo "OUTPUT_DIRECTORY = $out/cpp"
    echo "QUIET = YES"
    echo "WARNINGS = NO"
    echo "WARN_IF_UNDOCUMENTED = NO"
    echo "HAVE_DOT = NO"
} | doxygen - > /dev/null 2> "$out/doxygen.log"
modules=(tessera tessera.puzzlelib tessera.puzzlelib.Modules tessera.puzzlelib.Containers tessera.puzzlelib.Cost
         tessera.puzzlelib.Optimizers tessera.puzzlelib.Handlers tessera.puzzlelib.Backend)
(cd "$out/python" && PYTHONPATH=$pythonpath /usr/bin/python3 -m pydoc -w "${modules[@]}" > /dev/null)
cat > "$out/index.html" <<HTML
<!DOCTYPE html><html><head><meta charset="utf-8"><title>Tessera API reference</title></head><body>
<h1>Tessera API reference</h1>
<ul>
<li><a href="cpp/html/index.html">C++</a>: the headers (namespace tessera), from their comments</li>
<li><a href="python/tessera.html">Python</a>: the tessera package, from its docstrings
(<a href="python/tessera.puzzlelib.html">tessera.puzzlelib</a>)</li>
</ul>
<p>The guides are in docs/ (docs/guide.md, docs/python.md, docs/layers.md).</p>
</body></html>
HTML
echo "wrote $out/index.html ($(find "$out/cpp/html" -name 'class*.html' | wc -l) C++ class pages, $(ls "$out/python" | wc -l) Python pages)"
