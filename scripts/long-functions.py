#!/usr/bin/env python3
"""Functions longer than 100 lines, with no sentence above saying why.

Usage: scripts/long-functions.py [--all] DIR...
Prints `lines path:line name` for each function over the limit (test code excluded: a
`#[cfg(test)]` or `#[test]` item, a `tests` folder) and exits 1 when one has no reason: a
sentence in the comments and attributes right above its `fn` that says it is "long but"
(one piece, ...) or "long because". With `--all` it lists the explained ones too. A folder
that does not exist, or a file that cannot be read, is an error (exit 2), never a pass.

Strings, raw strings, characters and comments are skipped when braces are counted, so
a brace inside a format string does not end a function early.
"""
import os
import re
import sys

LIMIT = 100
REASON = re.compile(r"(?i)\blong (but|because)\b|\bwhy\b.*\blong\b|\blong\b.*\bwhy\b")
TEST_ATTR = re.compile(r"\s*#\[(cfg\(test\)|test|tokio::test\b[^\]]*)\]")
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


def preamble(lines, start):
    """The doc comments, comments and attributes directly above line `start`."""
    i = start
    while i > 0 and re.match(r"\s*(//|#\[|#!\[)", lines[i - 1]):
        i -= 1
    return "\n".join(lines[i:start])


def opens_block(code, i):
    """Whether the item after the attribute on line `i` has a body (`mod x {`, `fn f() {`),
    rather than ending at a `;` (`use x;`): only a body is skipped as test code."""
    rest = "\n".join(code[i + 1:i + 40])
    brace, semi = rest.find("{"), rest.find(";")
    return brace >= 0 and (semi < 0 or brace < semi)


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
        if in_tests is None and TEST_ATTR.match(lines[i]) and opens_block(code, i):
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
                found.append((count, path, start + 1, m.group(7), bool(REASON.search(preamble(lines, start)))))
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
        if not os.path.isdir(d):
            print(f"long-functions: {d} is not a folder", file=sys.stderr)
            return 2
        for root, _, files in os.walk(d):
            if "tests" in root.split(os.sep):
                continue
            for f in sorted(files):
                if f.endswith(".rs"):
                    try:
                        found += long_functions(os.path.join(root, f))
                    except (OSError, UnicodeDecodeError) as e:
                        print(f"long-functions: {os.path.join(root, f)}: {e}", file=sys.stderr)
                        return 2
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
