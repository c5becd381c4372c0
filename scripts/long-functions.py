#!/usr/bin/env python3
"""Functions longer than 100 lines, with no sentence above saying why.

Usage: scripts/long-functions.py [--all] DIR...
Prints `lines path:line name` for each function over the limit (test code excluded) and
exits 1 when one has no reason: a line within the five above its `fn` (doc comments and
attributes included) that says "Long but one piece", "why" or "long because". With
`--all` it lists the explained ones too.

Strings, raw strings, characters and comments are skipped when braces are counted, so
a brace inside a format string does not end a function early.
"""
import os
import re
import sys

LIMIT = 100
REASON = re.compile(r"(?i)long but one piece|long because|\bwhy\b")
FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+\"[^\"]*\"\s+)?fn\s+(\w+)")


def code_mask(text):
    """`text` with strings, chars and comments replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 100]) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            end = n if end < 0 else end + 1 + len(hashes)
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", text[i:j + 1]))
            i = j + 1
        elif c == "'":
            # A char literal ('x', '\n', '\u{..}'), not a lifetime ('a).
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", text[i:i + 12])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def long_functions(path):
    text = open(path, encoding="utf-8").read()
    lines = text.split("\n")
    code = code_mask(text).split("\n")
    found = []
    in_tests = None  # brace depth at which a #[cfg(test)] module started
    depth = 0
    i = 0
    while i < len(lines):
        line = code[i]
        if in_tests is None and re.match(r"\s*#\[cfg\(test\)\]", lines[i]):
            in_tests = depth
        m = FN.match(line)
        if m and in_tests is None and not line.rstrip().endswith(";"):
            start, d, opened, j = i, 0, False, i
            while j < len(lines):
                for ch in code[j]:
                    if ch == "{":
                        d, opened = d + 1, True
                    elif ch == "}":
                        d -= 1
                if (opened and d <= 0) or (not opened and code[j].rstrip().endswith(";")):
                    break
                j += 1
            count = j - start + 1
            if count > LIMIT:
                above = "\n".join(lines[max(0, start - 5):start])
                found.append((count, path, start + 1, m.group(7), bool(REASON.search(above))))
        for ch in line:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if in_tests is not None and depth <= in_tests:
                    in_tests = None
        i += 1
    return found


def main():
    args = sys.argv[1:]
    show_all = "--all" in args
    dirs = [a for a in args if a != "--all"] or ["src"]
    found = []
    for d in dirs:
        for root, _, files in os.walk(d):
            if "/tests" in root or root.endswith("tests"):
                continue
            for f in sorted(files):
                if f.endswith(".rs"):
                    found += long_functions(os.path.join(root, f))
    found.sort(reverse=True)
    bad = [f for f in found if not f[4]]
    for count, path, line, name, why in found:
        if show_all or not why:
            print(f"{count:4} {path}:{line} {name}{'' if not why else '  (why given)'}")
    print(f"{len(bad)} function(s) over {LIMIT} lines without a reason, {len(found) - len(bad)} with one",
          file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
