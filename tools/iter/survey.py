#!/usr/bin/env python3
"""Iter architect tool: survey the work directory so the architect can analyze existing patterns.

Arguments (JSON object as the first argument, or on stdin): {"workdir": ".", "max_files": 300}

Prints the standard tool result {status, tool_name, data, warnings, error, execution_time} with
data = {"files": [...], "languages": {ext: count}, "manifests": {name: head}, "readme": head,
"contents": {path: text}}: the text of the files, as they are now, so the architect analyzes
existing patterns and the worker, which sends whole files, sees what it replaces. Bounded: a
file of up to 32 KiB, 256 KiB in all (the rest listed in `not_shown`); binary files are left
out. Hidden folders, logs/ and vendored/dependency folders are skipped. Deterministic (sorted).
"""
from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path

from tool_args import read_args

TOOL_NAME = "survey"
MAX_FILE_BYTES = 32 * 1024
MAX_TOTAL_BYTES = 256 * 1024
SKIP_DIRS = {"logs", "node_modules", "vendor", "target", "__pycache__", "dist", "build"}
MANIFESTS = ("go.mod", "Cargo.toml", "pyproject.toml", "package.json", "Makefile", ".golangci.yml")


def head(path: Path, lines: int = 40) -> str:
    text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join(text[:lines])


def main() -> int:
    started = time.monotonic()
    args = read_args(sys.argv[1:], "workdir")
    root = Path(str(args.get("workdir") or "."))
    max_files = int(args.get("max_files", 300))
    warnings: list[str] = []
    if not root.is_dir():
        print(json.dumps({"status": "failed", "tool_name": TOOL_NAME, "data": {}, "warnings": [],
                          "error": f"work directory {root} does not exist",
                          "execution_time": round(time.monotonic() - started, 4)}))
        return 1
    files = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part.startswith(".") or part in SKIP_DIRS for part in rel.parts[:-1]) or rel.name.startswith("."):
            continue
        if path.is_file():
            files.append(rel.as_posix())
    if len(files) > max_files:
        warnings.append(f"{len(files)} files; listing the first {max_files}")
    languages = Counter(Path(f).suffix.lstrip(".") or "(none)" for f in files)
    manifests = {name: head(root / name) for name in MANIFESTS if (root / name).is_file()}
    readme = next((head(root / n) for n in ("README.md", "README", "AGENTS.md") if (root / n).is_file()), "")
    contents, not_shown, total = {}, [], 0
    for rel in files[:max_files]:
        raw = (root / rel).read_bytes()
        if b"\0" in raw[:8192]:
            continue
        if len(raw) > MAX_FILE_BYTES or total + len(raw) > MAX_TOTAL_BYTES:
            not_shown.append(rel)
            continue
        contents[rel] = raw.decode("utf-8", errors="replace")
        total += len(raw)
    if not_shown:
        warnings.append(f"{len(not_shown)} files too large to show: {', '.join(not_shown[:20])}")
    print(json.dumps({
        "status": "success",
        "tool_name": TOOL_NAME,
        "data": {"files": files[:max_files], "languages": dict(sorted(languages.items())),
                 "manifests": manifests, "readme": readme, "contents": contents,
                 "not_shown": not_shown},
        "warnings": warnings,
        "error": None,
        "execution_time": round(time.monotonic() - started, 4),
    }, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
