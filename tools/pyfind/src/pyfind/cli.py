"""Command-line entry point.

pyfind symbol NAME [--root DIR]      where NAME is defined (Python def/class) and used
pyfind defs FILE                     the definitions of a Python file, with line numbers
pyfind show FILE START [END]         a file's line range, numbered
"""

import argparse
import ast
import os
import re
import sys

from . import __version__

SKIP_DIRS = {".git", ".hg", "__pycache__", ".venv", "node_modules", "target", ".mypy_cache"}
TEXT_EXTS = {".py", ".rs", ".md", ".toml", ".yaml", ".yml", ".txt", ".cfg", ".json", ".sh", ".js", ".ts"}


def iter_files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        for name in sorted(filenames):
            if os.path.splitext(name)[1] in TEXT_EXTS:
                yield os.path.join(dirpath, name)


def python_defs(path):
    """(line, kind, qualified name) of every def/class in a Python file."""
    with open(path, encoding="utf-8", errors="replace") as f:
        source = f.read()
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError:
        return []
    out = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                kind = "class" if isinstance(child, ast.ClassDef) else "def"
                name = prefix + child.name
                out.append((child.lineno, kind, name))
                visit(child, name + ".")

    visit(tree, "")
    return out


def cmd_symbol(args):
    word = re.compile(r"\b" + re.escape(args.name) + r"\b")
    found = 0
    for path in iter_files(args.root):
        rel = os.path.relpath(path, args.root)
        if path.endswith(".py"):
            for line, kind, name in python_defs(path):
                if name == args.name or name.endswith("." + args.name):
                    print(f"{rel}:{line}: {kind} {name}")
                    found += 1
        if args.defs_only:
            continue
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                for n, text in enumerate(f, 1):
                    if word.search(text):
                        print(f"{rel}:{n}: {text.rstrip()}")
                        found += 1
                        if found >= args.max:
                            print(f"... stopped after {args.max} matches")
                            return 0
        except OSError as e:
            print(f"pyfind: {rel}: {e}", file=sys.stderr)
    if found == 0:
        print(f"no match for {args.name!r} under {args.root}", file=sys.stderr)
        return 1
    return 0


def cmd_defs(args):
    for line, kind, name in python_defs(args.file):
        print(f"{line}: {kind} {name}")
    return 0


def cmd_show(args):
    try:
        with open(args.file, encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
    except OSError as e:
        print(f"pyfind: {e}", file=sys.stderr)
        return 2
    end = args.end if args.end is not None else args.start
    if args.start < 1 or end < args.start:
        print(f"pyfind: bad range {args.start}-{end}", file=sys.stderr)
        return 2
    width = len(str(min(end, len(lines))))
    for n in range(args.start, min(end, len(lines)) + 1):
        print(f"{n:>{width}} | {lines[n - 1].rstrip()}")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="pyfind", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"pyfind {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("symbol", help="find where a symbol is defined and used")
    p.add_argument("name")
    p.add_argument("--root", default=".")
    p.add_argument("--max", type=int, default=200)
    p.add_argument("--defs-only", action="store_true")
    p.set_defaults(func=cmd_symbol)

    p = sub.add_parser("defs", help="list the definitions of a Python file")
    p.add_argument("file")
    p.set_defaults(func=cmd_defs)

    p = sub.add_parser("show", help="print a file's line range, numbered")
    p.add_argument("file")
    p.add_argument("start", type=int)
    p.add_argument("end", type=int, nargs="?")
    p.set_defaults(func=cmd_show)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
