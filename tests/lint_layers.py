"""The layers of the code look only down: a file under one of the directories of
docs/architecture.md's "Layers of the code" table includes project headers only from its
own directory or from directories of earlier rows. The table is the one source of the
order; this test reads it.

    lint_layers.py SOURCE_DIR                  the include order
    lint_layers.py SOURCE_DIR --max-lines N    no library file over N lines instead
"""
import argparse
import pathlib
import re
import sys

SOURCE_SUFFIXES = {".h", ".cpp", ".cu", ".cuh"}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def read_order(doc):
    """{top-level directory: rank} from the table under '## Layers of the code'."""
    text = doc.read_text(encoding="utf-8")
    section = text.split("## Layers of the code", 1)
    if len(section) != 2:
        sys.exit(f"{doc}: no '## Layers of the code' section")
    rank = {}
    for line in section[1].split("\n## ", 1)[0].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].isdigit():
            continue
        for directory in re.findall(r"`([a-z_]+)/[^`]*`", cells[1]):
            rank.setdefault(directory, int(cells[0]))
    if len(rank) < 5:
        sys.exit(f"{doc}: the layers table names too few directories ({sorted(rank)})")
    return rank


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("source_dir", type=pathlib.Path)
    parser.add_argument("--max-lines", type=int, default=0)
    args = parser.parse_args()
    root = args.source_dir
    rank = read_order(root / "docs" / "architecture.md")
    library = [d for d in rank if d not in ("tools", "examples", "python")]
    problems = []
    files = 0
    for directory in rank:
        for path in sorted((root / directory).rglob("*")):
            if path.suffix not in SOURCE_SUFFIXES or not path.is_file():
                continue
            files += 1
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            rel = path.relative_to(root)
            if args.max_lines and directory in library and len(lines) > args.max_lines:
                problems.append(f"{rel}: {len(lines)} lines (a library file stays under {args.max_lines})")
            if args.max_lines:
                continue
            for number, line in enumerate(lines, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = m.group(1).split("/", 1)[0]
                if target == directory or target not in rank:
                    continue
                if rank[target] >= rank[directory]:
                    problems.append(
                        f"{rel}:{number}: includes \"{m.group(1)}\": {target}/ (layer {rank[target]}) is not below "
                        f"{directory}/ (layer {rank[directory]}) in docs/architecture.md's table")
    for p in problems:
        print(p)
    order = " <- ".join(sorted(rank, key=lambda d: (rank[d], d)))
    what = f"under {args.max_lines} lines" if args.max_lines else f"against the order {order}"
    print(f"{files} files checked {what}: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
