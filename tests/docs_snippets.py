#!/usr/bin/env python3
"""Every C++ block in README.md and docs/*.md is checked: it compiles and runs as written.

A ```cpp block must follow one of two markers (on the line before it):
  <!-- example: docs/examples/NAME.cpp -->   the block is that file, verbatim, and is
      followed by <!-- end example -->; the file is a program the suite builds and runs
      (tests/CMakeLists.txt: doc_example(NAME page)).
  <!-- snippet -->  or  <!-- snippet: DECLARATIONS -->   the block is a fragment: its
      #include lines go to the top of a generated program and the rest runs inside a
      function, after DECLARATIONS (the variables the fragment uses but does not make).
      The program includes <tessera/tessera.h>, uses namespace tessera, and fails when a
      fragment throws.

In ```sh blocks, every `tessera` command (a line, or the part after `&&`; only the `$ `
lines when a block shows a prompt) is checked too: `check`, `summary`, `draw`, `help` and
`--version` run as written (in a scratch directory where `tests/` is the source's), and
must exit with 0, or with the code a `# exit code N` comment names; for `train`, every
option on the line must be one `tessera help train` lists.

usage: docs_snippets.py --source DIR --cxx COMPILER [--cxx-flags F;F] --library LIBTESSERA --cli TESSERA --work DIR
"""
import argparse
import os
import re
import shlex
import subprocess
import sys

EXAMPLE = re.compile(r"^<!-- example: (docs/examples/[\w.]+\.cpp) -->$")
SNIPPET = re.compile(r"^<!-- snippet(?:: (.*))? -->$")


def blocks(path):
    """(line, marker, body lines, line after the closing fence) of every ```cpp block."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```cpp":
            start = i
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            marker = lines[start - 1].strip() if start > 0 else ""
            after = lines[j + 1].strip() if j + 1 < len(lines) else ""
            out.append((start + 1, marker, lines[start + 1 : j], after))
            i = j + 1
        else:
            i += 1
    return out


def shell_blocks(path):
    """(line, command, expected exit code) of every tessera command in the ```sh blocks."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i].strip() in ("```sh", "```bash"):
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            body = lines[i + 1 : j]
            prompted = any(l.startswith("$ ") for l in body)
            for k, l in enumerate(body):
                if prompted and not l.startswith("$ "):
                    continue
                text = l[2:] if l.startswith("$ ") else l
                code = 0
                if "#" in text:
                    text, comment = text.split("#", 1)
                    m = re.search(r"exit code (\d+)", comment)
                    code = int(m.group(1)) if m else 0
                for part in text.split("&&"):
                    words = shlex.split(part)
                    if words and os.path.basename(words[0]) == "tessera":
                        out.append((i + 2 + k, words, code))
            i = j + 1
        else:
            i += 1
    return out


def check_commands(source, cli, work, pages):
    errors, ran, checked = [], 0, 0
    scratch = os.path.join(work, "commands")
    os.makedirs(scratch, exist_ok=True)
    link = os.path.join(scratch, "tests")
    if not os.path.exists(link):
        os.symlink(os.path.join(source, "tests"), link)
    train_help = subprocess.run([cli, "help", "train"], capture_output=True, text=True).stdout
    for page in pages:
        for line, words, code in shell_blocks(os.path.join(source, page)):
            where = f"{page}:{line}"
            args = words[1:]
            if args and args[0] == "train":
                for w in args[1:]:
                    if w.startswith("--") and w.split("=")[0] not in train_help:
                        errors.append(f"{where}: tessera train has no option {w}")
                checked += 1
                continue
            r = subprocess.run([cli] + args, capture_output=True, text=True, cwd=scratch)
            ran += 1
            if r.returncode != code:
                errors.append(f"{where}: `tessera {' '.join(args)}` exits with {r.returncode}, the page says "
                              f"{code}:\n{r.stdout[-1500:]}{r.stderr[-1500:]}")
    return errors, ran, checked


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--cxx", required=True)
    ap.add_argument("--cxx-flags", default="", help="a ;-list of extra flags (a sanitizer build's)")
    ap.add_argument("--library", required=True)
    ap.add_argument("--cli", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()

    pages = ["README.md"] + sorted("docs/" + f for f in os.listdir(os.path.join(a.source, "docs")) if f.endswith(".md"))
    registered = open(os.path.join(a.source, "tests/CMakeLists.txt"), encoding="utf-8").read()
    errors, shown = [], set()
    includes, functions, calls = [], [], []
    for page in pages:
        for line, marker, body, after in blocks(os.path.join(a.source, page)):
            where = f"{page}:{line}"
            m = EXAMPLE.match(marker)
            s = SNIPPET.match(marker)
            if m:
                example = m.group(1)
                shown.add(example)
                path = os.path.join(a.source, example)
                if not os.path.exists(path):
                    errors.append(f"{where}: the example {example} does not exist")
                    continue
                text = open(path, encoding="utf-8").read()
                if "\n".join(body) + "\n" != text:
                    errors.append(f"{where}: the block is not {example} as it is; copy the file into the block")
                if after != "<!-- end example -->":
                    errors.append(f"{where}: the example block must be followed by <!-- end example -->")
                name = os.path.splitext(os.path.basename(example))[0]
                if f"doc_example({name} " not in registered:
                    errors.append(f"{where}: {example} is not built and run: add doc_example({name} ...) to tests/CMakeLists.txt")
            elif s:
                fn = "snippet_" + re.sub(r"\W", "_", page) + f"_{line}"
                code = [l for l in body if not l.startswith("#include")]
                includes += [l for l in body if l.startswith("#include")]
                functions.append(f"// {where}\nvoid {fn}() {{\n{s.group(1) or ''}\n#line {line + 1} \"{page}\"\n" +
                                 "\n".join(code) + "\n}\n")
                calls.append((where, fn))
            else:
                errors.append(f"{where}: a ```cpp block needs <!-- example: docs/examples/NAME.cpp --> or "
                              "<!-- snippet[: declarations] --> on the line before it")
    for f in sorted(os.listdir(os.path.join(a.source, "docs/examples"))):
        if f.endswith(".cpp") and "docs/examples/" + f not in shown:
            errors.append(f"docs/examples/{f} is shown on no page")

    os.makedirs(a.work, exist_ok=True)
    program = os.path.join(a.work, "docs_snippets.cpp")
    with open(program, "w", encoding="utf-8") as out:
        out.write("// Generated by tests/docs_snippets.py from the docs' snippets.\n#include <tessera/tessera.h>\n\n")
        out.write("#include <cstdio>\n\n")
        for inc in sorted(set(includes)):
            out.write(inc + "\n")
        out.write("\nusing namespace tessera;\n\n")
        out.write("\n".join(functions))
        out.write("\nint main() {\n    int failed = 0;\n")
        for where, fn in calls:
            out.write(f"    try {{\n        {fn}();\n        std::printf(\"ran {where}\\n\");\n    }} catch (const std::exception& e) {{\n"
                      f"        std::printf(\"{where}: the snippet throws: %s\\n\", e.what());\n        ++failed;\n    }}\n")
        out.write("    return failed ? 1 : 0;\n}\n")
    exe = os.path.join(a.work, "docs_snippets")
    libdir = os.path.dirname(os.path.abspath(a.library))
    build = subprocess.run([a.cxx, "-std=c++20", "-Wall", "-Wno-unused-variable", "-Wno-unused-but-set-variable",
                            "-I" + a.source] + [f for f in a.cxx_flags.split(";") if f]
                           + [program, "-o", exe, a.library, "-Wl,-rpath," + libdir],
                           capture_output=True, text=True)
    if build.returncode != 0:
        errors.append("the snippets do not compile:\n" + build.stderr[-6000:])
    else:
        run = subprocess.run([exe], capture_output=True, text=True, cwd=a.work)
        sys.stdout.write(run.stdout)
        if run.returncode != 0:
            errors.append("a snippet failed when run (above)" + (": " + run.stderr[-2000:] if run.stderr else ""))
    command_errors, ran, checked = check_commands(a.source, a.cli, a.work, pages)
    errors += command_errors
    if errors:
        print("\n".join(errors))
        return 1
    print(f"{len(calls)} snippets compile and run; {len(shown)} examples shown verbatim; {ran} tessera commands run, "
          f"{checked} train commands' options checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
