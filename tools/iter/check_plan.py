#!/usr/bin/env python3
"""Iter plan check: is the architect's plan one the worker can follow?

Arguments (JSON object as the first argument, or on stdin):
    {"requirements": [{"id": "R1", ...}], "steps": [{"number": 1, "dependencies": [], "requirements": ["R1"], ...}]}

Steps run in the order given, so a step may depend only on a step listed before it. Problems:
no steps, a step number that is not a positive whole number or is used twice, a dependency on
the step itself, on a later step or on an unknown one, a requirement id the plan does not
declare. Prints the standard tool result with data = {"problems": [...]} and exits 1 when there
is any problem (at most 50 are listed). data.requirement_ids lists the plan's requirement ids: the
final validator must trace every one.
"""
from __future__ import annotations

import json
import sys
import time

from tool_args import read_args

TOOL_NAME = "check_plan"
MAX_PROBLEMS = 50


def is_number(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def problems_of(plan: dict) -> list[str]:
    problems: list[str] = []
    steps = plan.get("steps") or []
    if not isinstance(steps, list) or not steps:
        return ["The plan has no steps: give at least one step (STEPS ARE MANDATORY)."]
    known_reqs = {str(r.get("id")) for r in plan.get("requirements") or [] if isinstance(r, dict)}
    seen: set[int] = set()
    for position, step in enumerate(steps, start=1):
        if not isinstance(step, dict):
            problems.append(f"Step {position} is not an object.")
            continue
        number = step.get("number")
        label = f"Step {number}" if is_number(number) else f"The step at position {position}"
        if not is_number(number):
            problems.append(f"{label} has no positive step number (got {json.dumps(number)}).")
        elif number in seen:
            problems.append(f"Step number {number} is used twice.")
        for dep in step.get("dependencies") or []:
            if dep == number:
                problems.append(f"{label} depends on itself.")
            elif dep in seen:
                continue
            elif any(isinstance(s, dict) and s.get("number") == dep for s in steps):
                problems.append(f"{label} depends on step {dep}, which comes later: order the steps so dependencies come first.")
            else:
                problems.append(f"{label} depends on step {json.dumps(dep)}, which the plan does not have.")
        for req in step.get("requirements") or []:
            if str(req) not in known_reqs:
                problems.append(f"{label} names requirement {json.dumps(req)}, which is not one of the plan's requirements ({', '.join(sorted(known_reqs)) or 'none'}).")
        if is_number(number):
            seen.add(number)
    return problems[:MAX_PROBLEMS]


def main() -> int:
    started = time.monotonic()
    problems: list[str] = []
    requirement_ids: list[str] = []
    error = None
    try:
        args = read_args(sys.argv[1:])
        if not isinstance(args, dict):
            raise ValueError("the arguments must be a JSON object")
        problems = problems_of(args)
        requirement_ids = sorted({r.get("id") for r in args.get("requirements") or []
                                  if isinstance(r, dict) and isinstance(r.get("id"), str)})
    except (ValueError, AttributeError, TypeError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    print(json.dumps({
        "status": "failed" if error or problems else "success",
        "tool_name": TOOL_NAME,
        "data": {"problems": problems, "requirement_ids": requirement_ids},
        "warnings": [],
        "error": error or ("; ".join(problems) if problems else None),
        "execution_time": round(time.monotonic() - started, 4),
    }, ensure_ascii=False))
    return 1 if error or problems else 0


if __name__ == "__main__":
    sys.exit(main())
