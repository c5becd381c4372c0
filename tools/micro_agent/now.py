#!/usr/bin/env python3
"""micro-agent `now` tool: the current timestamp.

Arguments (JSON object as the first argument, or on stdin): {"timezone": "utc" | "local"} (optional,
default "local"). Prints the standard tool result {status, tool_name, data, warnings, error,
execution_time}; `data` is the observation {"iso": "2025-01-01T12:00:00+00:00"}.
"""
from __future__ import annotations

import datetime
import json
import sys
import time

TOOL_NAME = "now"


def read_args() -> dict:
    argv = sys.argv[1:]
    if argv and argv[0].lstrip().startswith("{"):
        return json.loads(argv[0])
    if argv:
        return {"timezone": argv[0]}
    if not sys.stdin.isatty():
        raw = sys.stdin.read().strip()
        if raw:
            return json.loads(raw)
    return {}


def main() -> int:
    started = time.monotonic()
    error = None
    data: dict
    try:
        args = read_args() or {}
        extra = sorted(set(args) - {"timezone"})
        if extra:
            raise ValueError(f"unexpected arguments: {', '.join(extra)}")
        tz = str(args.get("timezone") or "local").lower()
        if tz not in ("utc", "local"):
            raise ValueError("timezone must be 'utc' or 'local'")
        stamp = datetime.datetime.now(datetime.timezone.utc) if tz == "utc" else datetime.datetime.now().astimezone()
        data = {"iso": stamp.isoformat(timespec="seconds"), "timezone": tz}
    except ValueError as exc:
        error = f"{type(exc).__name__}: {exc}"
        data = {"error": error}
    print(json.dumps({
        "status": "failed" if error else "success",
        "tool_name": TOOL_NAME,
        "data": data,
        "warnings": [],
        "error": error,
        "execution_time": round(time.monotonic() - started, 4),
    }, ensure_ascii=False))
    return 1 if error else 0


if __name__ == "__main__":
    sys.exit(main())
