#!/usr/bin/env python3
"""micro-agent `load_demos`: the compiled few-shot demos (`COMPILED_DEMOS_PATH`, default
`opt/plan_demos.json`, written by `rondo optimize --role planner`), as decisions the planner
prompt shows before its own examples. A missing file is no demos, as in the reference.

Arguments (JSON object as the first argument, or on stdin): {"path": "/abs/plan_demos.json"}

The file is what `rondo optimize` writes for every workflow (docs/optimize.md): a JSON list of
{"inputs": {...}, "reply": ...}, where `inputs` are the run's inputs (its `question`) and
`reply` the planner's decision, {"tool": {"name", "args"}} or {"final": {"answer"}}, as JSON
text or as an object. Each demo becomes {question, state, decision} (`decision` compact JSON
text; `state` "[]", the first decision of a run). At most 16 demos and 1 MiB are read.

A file that exists but cannot be used (not JSON, not a list, an item without a question or
whose reply is not a decision) is a failure naming the file and the item, never silently no
demos: the workflow says so and stops.

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


def decision(reply):
    """The planner decision a demo's reply holds, or None."""
    if isinstance(reply, str):
        try:
            reply = json.loads(reply)
        except ValueError:
            return None
    if not isinstance(reply, dict):
        return None
    tool, final = reply.get("tool"), reply.get("final")
    if isinstance(tool, dict) and isinstance(tool.get("name"), str) and final is None:
        args = tool.get("args") if isinstance(tool.get("args"), dict) else {}
        return {"tool": {"name": tool["name"], "args": args}}
    if isinstance(final, dict) and isinstance(final.get("answer"), str) and tool is None:
        return {"final": {"answer": final["answer"]}}
    return None


def load(path: str):
    if not path or not os.path.isfile(path):
        return [], []
    if os.path.getsize(path) > MAX_BYTES:
        raise ValueError(f"{path}: larger than {MAX_BYTES} bytes")
    with open(path, encoding="utf-8") as f:
        try:
            items = json.load(f)
        except ValueError as exc:
            raise ValueError(f"{path} is not JSON: {exc}") from None
    if not isinstance(items, list):
        raise ValueError(f'{path} is not a list of {{"inputs": {{...}}, "reply": ...}}')
    demos, warnings = [], []
    for number, item in enumerate(items, start=1):
        if len(demos) == MAX_DEMOS:
            warnings.append(f"{path}: only the first {MAX_DEMOS} demos are used")
            break
        inputs = item.get("inputs") if isinstance(item, dict) else None
        question = inputs.get("question") if isinstance(inputs, dict) else None
        chosen = decision(item.get("reply")) if isinstance(item, dict) else None
        if not isinstance(question, str) or chosen is None:
            raise ValueError(
                f'demo {number} of {path} is not {{"inputs": {{"question": ...}}, "reply": <a planner decision>}}')
        demos.append({
            "question": question,
            "state": "[]",
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
