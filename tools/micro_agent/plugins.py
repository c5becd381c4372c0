#!/usr/bin/env python3
"""micro-agent's plugin loader for the Python-module form of TOOLS_MODULES (`pkg1.tools,pkg2.tools`).

    plugins.py list ROOT MODULE             the module's tools as Rondo tool specs (a JSON list)
    plugins.py call ROOT MODULE NAME [ARGS] runs one tool with its JSON arguments (an object, as
                                            the last argument or on stdin) and prints the
                                            standard tool result {status, tool_name, data,
                                            warnings, error, execution_time}

A module gives its tools as the reference's loader takes them: a dict `TOOLS`, else a function
`get_tools()` returning one; each value a tool with `name`, `description`, `schema` (JSON
Schema of its arguments) and `func` (called with the arguments dict) - an object with those
attributes (the reference's `micro_agent.tools.Tool`, which a module may import: a stand-in
is on the path when no real `micro_agent` package is), or a dict with those keys. The dict's
key is the tool's name, as in the reference's registry.

ROOT (the folder rondo started in) comes first on the module search path, as the current
folder does for Python; PYTHONPATH then applies. A listed tool's command names the folder
its module was found in, so a call imports the same file.
"""
from __future__ import annotations

import importlib
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SHIM = os.path.join(HERE, "shim")
# The most tools one module may give, and the most bytes of a description shown.
MAX_TOOLS = 64
MAX_DESCRIPTION = 2000


def fail(message: str) -> int:
    print(message, file=sys.stderr)
    return 1


def load(root: str, module: str):
    sys.path[:0] = [root]
    # The stand-in `micro_agent` comes last: a real package of that name wins.
    sys.path.append(SHIM)
    mod = importlib.import_module(module)
    tools = getattr(mod, "TOOLS", None)
    if not isinstance(tools, dict):
        get = getattr(mod, "get_tools", None)
        tools = get() if callable(get) else None
    if not isinstance(tools, dict):
        raise ValueError(f"module {module} has no TOOLS dict and no get_tools() returning one")
    return mod, tools


def field(tool, name):
    if isinstance(tool, dict):
        return tool.get(name)
    return getattr(tool, name, None)


def search_root(mod, module: str) -> str:
    """The folder of sys.path the module was found in (`/x` for /x/pkg/tools.py)."""
    path = os.path.abspath(getattr(mod, "__file__", "") or "")
    folder = os.path.dirname(path)
    if os.path.basename(path) == "__init__.py":
        folder = os.path.dirname(folder)
    for _ in module.split(".")[1:]:
        folder = os.path.dirname(folder)
    return folder


def list_tools(root: str, module: str) -> int:
    mod, tools = load(root, module)
    if len(tools) > MAX_TOOLS:
        return fail(f"module {module} gives {len(tools)} tools; at most {MAX_TOOLS} are taken")
    found_in = search_root(mod, module)
    words = [sys.executable, "-B", os.path.abspath(__file__), "call", found_in, module]
    if any(" " in w for w in words):
        return fail(f"a path of the command has a space, which a tool's command cannot hold: {' '.join(words)}")
    specs = []
    for key, tool in tools.items():
        description = str(field(tool, "description") or key)[:MAX_DESCRIPTION]
        schema = field(tool, "schema")
        if not callable(field(tool, "func")):
            return fail(f"tool {key!r} of module {module} has no callable func")
        spec = {
            "tool_name": str(key),
            "executable": " ".join(words + [str(key)]),
            "usage": f"{key}: {description}\nargs: a JSON object"
            + (f" with the schema {json.dumps(schema)}" if schema else ""),
            "timeout": 30,
        }
        if isinstance(schema, dict) and schema:
            spec["input_schema"] = schema
        specs.append(spec)
    print(json.dumps(specs))
    return 0


def read_args(argv: list[str]) -> dict:
    if argv:
        return json.loads(argv[0])
    raw = "" if sys.stdin.isatty() else sys.stdin.read().strip()
    return json.loads(raw) if raw else {}


def call_tool(root: str, module: str, name: str, argv: list[str]) -> int:
    started = time.monotonic()
    error = None
    data = None
    try:
        args = read_args(argv)
        if not isinstance(args, dict):
            raise ValueError("the arguments are not a JSON object")
        _, tools = load(root, module)
        if name not in tools:
            raise ValueError(f"Unknown tool '{name}'")
        data = field(tools[name], "func")(args)
    except Exception as exc:  # the reference's run_tool: any failure is the call's error
        error = f"{type(exc).__name__}: {exc}"
        data = {"error": error}
    try:
        text = json.dumps(data, ensure_ascii=False)
    except (TypeError, ValueError):
        text = json.dumps(str(data), ensure_ascii=False)
    print(json.dumps({
        "status": "failed" if error else "success",
        "tool_name": name,
        "data": json.loads(text),
        "warnings": [],
        "error": error,
        "execution_time": round(time.monotonic() - started, 4),
    }, ensure_ascii=False))
    return 1 if error else 0


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "list":
        try:
            return list_tools(argv[1], argv[2])
        except Exception as exc:
            return fail(f"cannot load the tools of {argv[2]}: {type(exc).__name__}: {exc}")
    if len(argv) >= 4 and argv[0] == "call":
        return call_tool(argv[1], argv[2], argv[3], argv[4:])
    return fail(__doc__ or "")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
