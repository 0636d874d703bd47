"""docs/python.md runs as written: its example block is docs/examples/python_lenet.py
verbatim, and that program and the page's other ```python blocks (in order, as one
script) run without error."""

import os
import re
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
PAGE = os.path.join(ROOT, "docs", "python.md")
EXAMPLE = re.compile(r"^<!-- example: (docs/examples/[\w.]+\.py) -->$")


def python_blocks():
    """[(example file or None, block text)] for every ```python block of the page."""
    lines = open(PAGE, encoding="utf-8").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            marker = EXAMPLE.match(lines[i - 1].strip()) if i > 0 else None
            j = i + 1
            while lines[j].strip() != "```":
                j += 1
            out.append((marker.group(1) if marker else None, "\n".join(lines[i + 1:j]) + "\n"))
            i = j
        i += 1
    return out


def run(args, tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([p for p in sys.path if p] + [env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable] + args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout


def test_example_is_the_file_and_runs(tmp_path):
    examples = [(f, text) for f, text in python_blocks() if f]
    assert examples, "docs/python.md shows no example file"
    for f, text in examples:
        path = os.path.join(ROOT, f)
        assert open(path, encoding="utf-8").read() == text, f"the block in docs/python.md is not {f} verbatim"
        out = run([path], tmp_path)
        assert "test accuracy" in out


def test_page_blocks_run(tmp_path):
    script = "".join(text for f, text in python_blocks() if not f)
    assert "import tessera" in script
    (tmp_path / "page.py").write_text(script)
    run([str(tmp_path / "page.py")], tmp_path)


def test_transformer_block_example_runs(tmp_path):
    """docs/examples/transformer_block.py: the block matches PyTorch's
    nn.TransformerEncoderLayer (when PyTorch is installed) and learns its task."""
    out = run([os.path.join(ROOT, "docs", "examples", "transformer_block.py")], tmp_path)
    assert "accuracy on the 512 sequences" in out
