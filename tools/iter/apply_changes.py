#!/usr/bin/env python3
"""Iter worker tool: apply the worker's file changes inside the work directory.

It is every skill of the worker: `--skill NAME` names the result, `--only GLOB,GLOB` limits the
files the skill may touch (matched against the path relative to the work directory and against
its file name), so `test` writes test files only and `docs` documentation only.

Arguments (flags, then a JSON object as the next argument, or on stdin):
    {"workdir": ".", "changes": [{"path": "pkg/x.go", "action": "create|modify|delete", "content": "..."}]}

Paths are relative to `workdir`; absolute paths, `..` escapes and the `logs/` capture folder are
refused. Prints the standard tool result {status, tool_name, data, warnings, error, execution_time}
with data = {"written": [...], "deleted": [...], "diff": "<unified diff of the changes>"} (each file's
diff cut at 64 KiB), so validators review the changes themselves. Exit code 1 when any change was refused
(nothing is written in that case: the changes are checked before the first write).
"""
from __future__ import annotations

import difflib
import fnmatch
import json
import sys
import time
from pathlib import Path

from tool_args import read_args

TOOL_NAME = "apply_changes"
ACTIONS = {"create", "modify", "delete"}
MAX_DIFF = 64 * 1024


def old_text(target: Path) -> str:
    try:
        return target.read_text(encoding="utf-8") if target.is_file() else ""
    except (OSError, UnicodeDecodeError):
        return "<not UTF-8 text>\n"


def diff_of(rel: str, before: str, after: str) -> str:
    text = "".join(difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True),
        fromfile=f"a/{rel}" if before else "/dev/null", tofile=f"b/{rel}" if after else "/dev/null"))
    if len(text) > MAX_DIFF:
        text = text[:MAX_DIFF] + f"\n[... diff of {rel} cut at {MAX_DIFF} bytes ...]\n"
    return text


def read_flags(argv: list[str]) -> tuple[str, list[str], list[str]]:
    name, only = TOOL_NAME, []
    while len(argv) >= 2 and argv[0] in ("--skill", "--only"):
        if argv[0] == "--skill":
            name = argv[1]
        else:
            only = [g for g in argv[1].split(",") if g]
        argv = argv[2:]
    return name, only, argv


def allowed(rel: str, only: list[str]) -> bool:
    return not only or any(fnmatch.fnmatch(rel, g) or fnmatch.fnmatch(Path(rel).name, g) for g in only)


def resolve(root: Path, rel: str) -> Path:
    if not rel or Path(rel).is_absolute():
        raise ValueError(f"path must be relative to the work directory: {rel!r}")
    target = (root / rel).resolve()
    if target != root and root not in target.parents:
        raise ValueError(f"path escapes the work directory: {rel!r}")
    if target.relative_to(root).parts[:1] == ("logs",):
        raise ValueError(f"logs/ holds captured build output and is not writable by the worker: {rel!r}")
    return target


def main() -> int:
    started = time.monotonic()
    name, only, argv = read_flags(sys.argv[1:])
    written: list[str] = []
    deleted: list[str] = []
    warnings: list[str] = []
    diffs: list[str] = []
    error = None
    try:
        args = read_args(argv)
        extra = sorted(set(args) - {"workdir", "changes"})
        if extra:
            raise ValueError(f"unexpected arguments: {', '.join(extra)}")
        root = Path(str(args.get("workdir") or ".")).resolve()
        changes = args.get("changes") or []
        if not isinstance(changes, list):
            raise ValueError("`changes` must be a list")
        plan = []
        for change in changes:
            action = change.get("action", "modify")
            if action not in ACTIONS:
                raise ValueError(f"unknown action {action!r} (expected create, modify or delete)")
            target = resolve(root, str(change.get("path", "")))
            if not allowed(target.relative_to(root).as_posix(), only):
                raise ValueError(f"the {name} skill may only change {', '.join(only)}: {change.get('path')!r}")
            if action != "delete" and not isinstance(change.get("content"), str):
                raise ValueError(f"{change.get('path')}: `content` (the full file text) is required")
            plan.append((action, target, change))
        for action, target, change in plan:
            rel = target.relative_to(root).as_posix()
            before = old_text(target)
            diffs.append(diff_of(rel, before, "" if action == "delete" else change["content"]))
            if action == "delete":
                if target.exists():
                    target.unlink()
                    deleted.append(rel)
                else:
                    warnings.append(f"{rel}: already absent")
                continue
            if action == "create" and target.exists():
                warnings.append(f"{rel}: exists; overwritten")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(change["content"], encoding="utf-8")
            written.append(rel)
    except (ValueError, OSError, AttributeError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    print(json.dumps({
        "status": "failed" if error else "success",
        "tool_name": name,
        "data": {"written": written, "deleted": deleted, "diff": "".join(diffs)},
        "warnings": warnings,
        "error": error,
        "execution_time": round(time.monotonic() - started, 4),
    }, ensure_ascii=False))
    return 1 if error else 0


if __name__ == "__main__":
    sys.exit(main())
