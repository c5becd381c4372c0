#!/usr/bin/env python3
"""micro-agent `load_demos`: the compiled few-shot demos (`COMPILED_DEMOS_PATH`, default
`opt/plan_demos.json`, written by `micro-agent optimize`), as decisions the planner prompt shows
before its own examples. A missing file is no demos, as in the reference.

Arguments (JSON object as the first argument, or on stdin): {"path": "/abs/plan_demos.json"}

The file is a JSON list of {question, state, tool_calls: [{name, args}], final}; each demo
becomes {question, state, decision} where the decision is the first tool call
({"tool": {"name", "args"}}) or the final answer ({"final": {"answer"}}), as compact JSON text.
At most 16 demos and 1 MiB are read.

Prints the standard tool result {status, tool_name, data, warnings, error, execution_time} with
`data` = {"demos": [...]}.
"""
from __future__ import annotations

import json
import os
import sys
import time

TOOL_NAME = "load_demos"
MAX_BYTES = 1 << 20
MAX_DEMOS = 16


def read_args() -> dict:
    argv = sys.argv[1:]
    if argv:
        return json.loads(argv[0])
    raw = sys.stdin.read().strip() if not sys.stdin.isatty() else ""
    return json.loads(raw) if raw else {}


def decision(item: dict):
    calls = item.get("tool_calls")
    if isinstance(calls, list) and calls and isinstance(calls[0], dict) and calls[0].get("name"):
        args = calls[0].get("args") if isinstance(calls[0].get("args"), dict) else {}
        return {"tool": {"name": str(calls[0]["name"]), "args": args}}
    if isinstance(item.get("final"), str) and item["final"]:
        return {"final": {"answer": item["final"]}}
    return None


def load(path: str):
    if not path or not os.path.isfile(path):
        return [], []
    if os.path.getsize(path) > MAX_BYTES:
        return [], [f"{path}: larger than {MAX_BYTES} bytes; no demos loaded"]
    with open(path, encoding="utf-8") as f:
        items = json.load(f)
    if not isinstance(items, list):
        raise ValueError(f"{path}: not a JSON list of demos")
    demos, warnings = [], []
    for item in items:
        if len(demos) == MAX_DEMOS:
            warnings.append(f"{path}: only the first {MAX_DEMOS} demos are used")
            break
        if not isinstance(item, dict) or not isinstance(item.get("question"), str):
            continue
        chosen = decision(item)
        if chosen is None:
            continue
        state = item.get("state", "[]")
        demos.append({
            "question": item["question"],
            "state": state if isinstance(state, str) else json.dumps(state),
            "decision": json.dumps(chosen, ensure_ascii=False),
        })
    return demos, warnings


def main() -> int:
    started = time.monotonic()
    error, warnings = None, []
    try:
        demos, warnings = load(str(read_args().get("path") or ""))
        data = {"demos": demos}
    except (ValueError, OSError, TypeError) as exc:
        error = f"{type(exc).__name__}: {exc}"
        data = {"error": error, "demos": []}
    print(json.dumps({
        "status": "failed" if error else "success",
        "tool_name": TOOL_NAME,
        "data": data,
        "warnings": warnings,
        "error": error,
        "execution_time": round(time.monotonic() - started, 4),
    }))
    return 1 if error else 0


if __name__ == "__main__":
    sys.exit(main())
