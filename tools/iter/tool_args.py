"""How Iter's tools read their arguments: a JSON object as the first argument, or on stdin."""
from __future__ import annotations

import json
import sys


def read_args(argv: list[str], positional: str | None = None) -> dict:
    """The tool's arguments. With `positional`, a first argument that is not JSON is that
    field's value (`survey.py DIR`)."""
    if argv and argv[0].lstrip().startswith("{"):
        return json.loads(argv[0])
    if argv and positional:
        return {positional: argv[0]}
    if not sys.stdin.isatty():
        raw = sys.stdin.read().strip()
        if raw:
            return json.loads(raw)
    return {}
