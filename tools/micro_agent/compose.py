#!/usr/bin/env python3
"""micro-agent `compose`: the answer of a loop that ended without an accepted final answer,
composed from the tool results so their key values appear in it (reference: micro-agent.md,
"composes final answers from tool results ... to preserve key values").

Arguments (JSON object as the first argument, or on stdin):
  {"question": "...", "steps": [{tool, args, observation}, ...], "must_math": bool,
   "fallback": "the model's own answer, if any"}

Steps may be native tool-call results too ({id, tool, args, ok, error_kind, observation}).

The answer joins with " | ": the first calculator result, then "UTC: <iso>" of the last `now`
call. A math question whose calculator never gave a result gets a last-chance value: the sum of
its integers when it asks to add or sum, else its longest arithmetic-looking part (arithmetic
words between numbers read as operators: "6 times 7" is 6 * 7) evaluated by the calculator's own
safe evaluator. With nothing to compose from, the answer is `fallback` (native mode: the
model's text); without one `composed` is false and the workflow asks the model instead.

Prints the standard tool result {status, tool_name, data, warnings, error, execution_time} with
`data` = {"answer": "<string>", "composed": bool}.
"""
from __future__ import annotations

import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from calculator import CalcError, safe_eval  # noqa: E402

TOOL_NAME = "compose"
WORD_OPERATORS = [
    (r"(?:times|multiplied\s+by)", "*"),
    (r"(?:divided\s+by|over)", "/"),
    (r"plus", "+"),
    (r"minus", "-"),
    (r"(?:to\s+the\s+power\s+of)", "**"),
]


def read_args() -> dict:
    argv = sys.argv[1:]
    if argv:
        return json.loads(argv[0])
    raw = sys.stdin.read().strip() if not sys.stdin.isatty() else ""
    return json.loads(raw) if raw else {}


def text(value) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, str) else json.dumps(value)


def last_chance(question: str):
    lowered = question.lower()
    if re.search(r"\b(add|sum)\b", lowered):
        numbers = [int(n) for n in re.findall(r"\b\d+\b", question)]
        if len(numbers) >= 2:
            return sum(numbers)
    # "6 times 7", "10 divided by 4": the arithmetic words between numbers as operators.
    for words, op in WORD_OPERATORS:
        question = re.sub(rf"(?<=\d)\s+{words}\s+(?=[\d(])", f" {op} ", question, flags=re.I)
    candidates = [c.strip() for c in re.findall(r"[0-9+\-*/%().!^\s]+", question)]
    candidates = [c for c in candidates if re.search(r"\d", c) and re.search(r"[-+*/%^()!]", c)]
    for candidate in sorted(candidates, key=len, reverse=True):
        try:
            return safe_eval(candidate.strip(" ?."))
        except (CalcError, SyntaxError, ValueError, TypeError, OverflowError, ZeroDivisionError):
            continue
    return None


def compose(question: str, steps: list, must_math: bool, fallback: str = "") -> dict:
    def observed(name):
        return [s["observation"] for s in steps
                if isinstance(s, dict) and s.get("tool") == name and isinstance(s.get("observation"), dict)]

    calculators, nows = observed("calculator"), observed("now")
    parts = []
    if calculators:
        results = [o["result"] for o in calculators if o.get("result") is not None]
        if results:
            parts.append(text(results[0]))
    elif must_math:
        value = last_chance(question)
        if value is not None:
            parts.append(text(value))
    if nows and nows[-1].get("iso"):
        parts.append(f"UTC: {nows[-1]['iso']}")
    if parts:
        return {"answer": " | ".join(parts), "composed": True}
    # Nothing to keep from the tools: the model's own text (native mode), else not composed.
    if fallback.strip():
        return {"answer": fallback, "composed": True}
    return {"answer": "", "composed": False}


def main() -> int:
    started = time.monotonic()
    error = None
    try:
        args = read_args()
        steps = args.get("steps") or []
        if not isinstance(steps, list):
            raise ValueError("`steps` must be a list")
        data = compose(str(args.get("question") or ""), steps, bool(args.get("must_math")),
                       str(args.get("fallback") or ""))
    except (ValueError, TypeError, KeyError) as exc:
        error = f"{type(exc).__name__}: {exc}"
        data = {"error": error}
    print(json.dumps({
        "status": "failed" if error else "success",
        "tool_name": TOOL_NAME,
        "data": data,
        "warnings": [],
        "error": error,
        "execution_time": round(time.monotonic() - started, 4),
    }))
    return 1 if error else 0


if __name__ == "__main__":
    sys.exit(main())
