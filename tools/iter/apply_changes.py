#!/usr/bin/env python3
"""Iter worker tool: apply the worker's file changes inside the work directory.

Arguments (JSON object as the first argument, or on stdin):
    {"workdir": ".", "changes": [{"path": "pkg/x.go", "action": "create|modify|delete", "content": "..."}]}

Paths are relative to `workdir`; absolute paths, `..` escapes and the `logs/` capture folder are
refused. Prints the standard tool result {status, tool_name, data, warnings, error, execution_time}
with data = {"written": [...], "deleted": [...]}. Exit code 1 when any change was refused
(nothing is written in that case: the changes are checked before the first write).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

TOOL_NAME = "apply_changes"
ACTIONS = {"create", "modify", "delete"}


def read_args() -> dict:
    argv = sys.argv[1:]
    if argv and argv[0].lstrip().startswith("{"):
        return json.loads(argv[0])
    if not sys.stdin.isatty():
        raw = sys.stdin.read().strip()
        if raw:
            return json.loads(raw)
    return {}


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
    written: list[str] = []
    deleted: list[str] = []
    warnings: list[str] = []
    error = None
    try:
        args = read_args()
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
            if action != "delete" and not isinstance(change.get("content"), str):
                raise ValueError(f"{change.get('path')}: `content` (the full file text) is required")
            plan.append((action, target, change))
        for action, target, change in plan:
            rel = target.relative_to(root).as_posix()
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
        "tool_name": TOOL_NAME,
        "data": {"written": written, "deleted": deleted},
        "warnings": warnings,
        "error": error,
        "execution_time": round(time.monotonic() - started, 4),
    }, ensure_ascii=False))
    return 1 if error else 0


if __name__ == "__main__":
    sys.exit(main())
