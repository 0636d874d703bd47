#!/usr/bin/env python3
"""Writes python/tessera/__init__.pyi, the type stub of the `tessera` package, from the
built package: every public name, the layer classes with their arguments (types from their
defaults), docstrings and argument meanings, the other classes' methods and properties and
the functions with their argument names (types left open where the bindings do not say).

Usage: tools/python_stubs.py [OUT]   (with the built package importable: PYTHONPATH=build/python)
       tools/python_stubs.py --check FILE   exits 1 when FILE differs from what it would write
"""

import inspect
import re
import sys

import tessera as ts

PER_DIM = {"size", "stride", "pad", "dilation", "postpad", "axis", "start", "end", "shape", "axes"}
HEADER = ('"""Type stub of the tessera package, written by tools/python_stubs.py from the built package\n'
          '(the python.stubs_current test checks that it is current)."""\n\n'
          "from typing import Any, Sequence\n")


def annotation(name, default, required=False):
    if name == "name":
        return "str | None"
    if name in PER_DIM:
        base = "int | Sequence[int]"
    elif isinstance(default, bool):
        base = "bool"
    elif isinstance(default, int):
        base = "int"
    elif isinstance(default, float):
        base = "float"
    elif isinstance(default, str):
        base = "str"
    else:
        base = "Any"
    return base if required or default is not None or base == "Any" else f"{base} | None"


def docstring(text, indent):
    if not text:
        return ""
    text = text.strip().replace("\\", "\\\\").replace('"""', "'''")
    pad = " " * indent
    body = "\n".join((pad + line) if line.strip() else "" for line in text.splitlines())
    return f'{pad}"""\n{body}\n{pad}"""\n'


def layer(name, cls):
    params = []
    for p in cls.__signature__.parameters.values():
        if p.default is inspect.Parameter.empty:
            params.append(f"{p.name}: {annotation(p.name, None, required=True)}")
        else:
            params.append(f"{p.name}: {annotation(p.name, p.default)} = ...")
    return (f"class {name}(Module):\n" + docstring(cls.__doc__, 4) +
            f"    def __init__(self, {', '.join(params)}) -> None: ...\n")


_SIGNATURE = re.compile(r"^\w+\((.*)\)(?: -> .*)?$")


def arguments(obj, method):
    """The argument list of a function or method, names kept, types left open."""
    try:
        sig = inspect.signature(obj)
        names = []
        starred = False
        for p in sig.parameters.values():
            if p.kind is p.KEYWORD_ONLY and not starred:
                names.append("*")
                starred = True
            if p.kind is p.VAR_POSITIONAL:
                starred = True
                names.append(f"*{p.name}: Any")
            elif p.kind is p.VAR_KEYWORD:
                names.append(f"**{p.name}: Any")
            else:
                names.append(p.name if p.name == "self" else
                             f"{p.name}: Any" + ("" if p.default is inspect.Parameter.empty else " = ..."))
        if method and (not names or names[0] != "self"):
            names.insert(0, "self")
        return ", ".join(names)
    except (TypeError, ValueError):
        pass
    first = (getattr(obj, "__doc__", None) or "").strip().splitlines()
    m = _SIGNATURE.match(first[0]) if first else None
    if not m or "Overloaded function" in (obj.__doc__ or ""):
        return ("self, " if method else "") + "*args: Any, **kwargs: Any"
    names, depth, cur = [], 0, ""
    for ch in m.group(1) + ",":  # split on top-level commas
        if ch == "," and depth == 0:
            if cur.strip():
                names.append(cur.strip())
            cur = ""
            continue
        depth += ch in "([{"
        depth -= ch in ")]}"
        cur += ch
    out = []
    for arg in names:
        arg_name = arg.split(":")[0].split("=")[0].strip()
        if arg_name == "*":
            out.append("*")
        elif arg_name.startswith("*"):
            out.append(f"{arg_name}: Any")
        elif arg_name == "self":
            out.append("self")
        else:
            out.append(f"{arg_name}: Any" + (" = ..." if "=" in arg else ""))
    if method and (not out or out[0] != "self"):
        out.insert(0, "self")
    return ", ".join(out)


def plain_class(name, cls, bases):
    lines = [f"class {name}({', '.join(bases)}):" if bases else f"class {name}:"]
    doc = docstring(cls.__doc__, 4)
    if doc:
        lines.append(doc.rstrip("\n"))
    members = []
    for attr in sorted(vars(cls)):
        if attr.startswith("_") and attr not in ("__init__", "__call__", "__getitem__", "__len__", "__iter__"):
            continue
        value = vars(cls)[attr]
        if isinstance(value, property) or type(value).__name__ == "property":
            members.append(f"    {attr}: Any")
        elif isinstance(value, (staticmethod, classmethod)):
            members.append(f"    @staticmethod\n    def {attr}({arguments(value.__func__, False)}) -> Any: ...")
        elif callable(value):
            ret = "None" if attr == "__init__" else "Any"
            members.append(f"    def {attr}({arguments(value, True)}) -> {ret}: ...")
        else:
            members.append(f"    {attr}: Any")
    members.append("    def __getattr__(self, name: str) -> Any: ...")
    return "\n".join(lines + members) + "\n"


def stub():
    out = [HEADER]
    layers = set(ts._LAYERS)
    names = list(ts.__all__)
    classes = [n for n in names if inspect.isclass(getattr(ts, n)) and n not in layers]
    public = set(names)
    # Base classes first (Module, Error, Cost, Optimizer, ...), then the rest by name.
    classes.sort(key=lambda n: (len([b for b in inspect.getmro(getattr(ts, n))[1:] if b.__name__ in public]), n))
    for n in classes:
        cls = getattr(ts, n)
        bases = [b.__name__ for b in cls.__bases__ if b.__name__ in public and b.__name__ != n]
        out.append(plain_class(n, cls, bases))
    for n in sorted(layers):
        out.append(layer(n, getattr(ts, n)))
    for n in names:
        obj = getattr(ts, n)
        if n in layers or inspect.isclass(obj):
            continue
        if callable(obj):
            out.append(f"def {n}({arguments(obj, False)}) -> Any: ...\n")
        else:
            out.append(f"{n}: Any\n")
    return "\n".join(out)


def main(argv):
    text = stub()
    if len(argv) == 3 and argv[1] == "--check":
        with open(argv[2], encoding="utf-8") as f:
            if f.read() != text:
                print(f"{argv[2]} is not current: run tools/python_stubs.py {argv[2]} (PYTHONPATH=build/python)")
                return 1
        print(f"{argv[2]} is current")
        return 0
    path = argv[1] if len(argv) > 1 else "python/tessera/__init__.pyi"
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
