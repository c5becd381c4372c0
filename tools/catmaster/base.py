"""Shared helpers for the CatMaster tools (standard library only).

Every tool:
  - validates its payload against a small schema that rejects extra fields strictly
    (the Pydantic `InputModel(**payload)` step of the reference),
  - works in the USER VIEW: paths are workspace-relative; `.catmaster/` and `.rondo/` (the
    system view: CatMaster's records and Rondo's run records) cannot be listed, read or
    written through a tool,
  - never names a host path outside the workspace in what it returns (errors included),
  - returns (prints) the standard output of `create_tool_output`:
    {status, tool_name, data, warnings, error, execution_time}.

The workspace root is $CATMASTER_WORKSPACE when set, else the current directory
(Rondo runs tool roles with the run directory as the working directory).
"""
from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable

SYSTEM_DIR = ".catmaster"
# Folders of the system view: CatMaster's records and the engine's run records.
SYSTEM_DIRS = (SYSTEM_DIR, ".rondo")


def is_system_part(part: str) -> bool:
    """`.CATMASTER` is `.catmaster` on a case-insensitive file system: refused too."""
    return part.lower() in SYSTEM_DIRS


class ToolInputError(ValueError):
    """The payload does not match the tool's input schema."""


def workspace_root() -> Path:
    return Path(os.environ.get("CATMASTER_WORKSPACE") or ".").resolve()


def resolve_workspace_path(rel: str, must_exist: bool = False) -> Path:
    """A workspace-relative path, resolved and checked to stay in the user view."""
    root = workspace_root()
    if not isinstance(rel, str) or not rel.strip():
        raise ToolInputError("path must be a non-empty workspace-relative string")
    if Path(rel).is_absolute():
        raise ToolInputError(f"path must be workspace-relative, not absolute: {rel}")
    if any(is_system_part(part) for part in Path(rel).parts):
        raise ToolInputError(f"{rel}: the system view ({', '.join(SYSTEM_DIRS)}) is not reachable from tools")
    target = (root / rel).resolve()
    if not inside_workspace(target):
        raise ToolInputError(f"path escapes the workspace: {rel}")
    if in_system_view(target):
        raise ToolInputError(f"{rel}: the system view ({', '.join(SYSTEM_DIRS)}) is not reachable from tools")
    if must_exist and not target.exists():
        raise ToolInputError(f"path does not exist: {rel}")
    return target


def inside_workspace(path: Path) -> bool:
    """Whether `path`, resolved (links followed), is the workspace or lies beneath it."""
    root = workspace_root()
    target = path.resolve()
    return target == root or root in target.parents


def in_system_view(path: Path) -> bool:
    """Whether `path`, resolved, lies under a system-view folder of the workspace."""
    root = workspace_root()
    target = path.resolve()
    if target == root or root not in target.parents:
        return False
    return any(is_system_part(part) for part in target.relative_to(root).parts)


def workspace_relpath(path: Path) -> str:
    rel = path.resolve().relative_to(workspace_root()).as_posix()
    return rel or "."


def create_tool_output(tool_name: str, success: bool, data: dict | None = None,
                       warnings: list[str] | None = None, error: str | None = None,
                       execution_time: float | None = None) -> dict:
    return {
        "status": "success" if success else "failed",
        "tool_name": tool_name,
        "data": data or {},
        "warnings": warnings or [],
        "error": error,
        "execution_time": execution_time,
    }


def validate(payload: Any, schema: dict[str, tuple[type | tuple[type, ...], Any]]) -> dict:
    """schema: field -> (accepted types, default); default `...` means required. Extra fields are refused."""
    if not isinstance(payload, dict):
        raise ToolInputError("payload must be a JSON object")
    extra = sorted(set(payload) - set(schema))
    if extra:
        raise ToolInputError(f"extra fields not permitted: {', '.join(extra)}")
    params = {}
    for name, (types, default) in schema.items():
        if name not in payload or payload[name] is None:
            if default is ...:
                raise ToolInputError(f"field required: {name}")
            params[name] = default
            continue
        value = payload[name]
        if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
            raise ToolInputError(f"{name}: wrong type bool")
        if not isinstance(value, types):
            raise ToolInputError(f"{name}: expected {types}, got {type(value).__name__}")
        params[name] = value
    return params


# An absolute path in a message: a `/` not preceded by a word character, a dot or a slash.
ABSOLUTE_PATH = re.compile(r"(?<![\w./])/[^\s'\"`,;:()\[\]{}]+")


def confine_message(text: str) -> str:
    """A message as the model may see it: the workspace's own absolute path becomes
    workspace-relative, and any other absolute path (a host file an exception named) is
    replaced, so no message reveals what lies outside the workspace."""
    root = str(workspace_root())

    def relative(match: re.Match) -> str:
        path = match.group(0)
        if path == root:
            return "."
        if path.startswith(root + "/"):
            return path[len(root) + 1:]
        return "<outside the workspace>"

    return ABSOLUTE_PATH.sub(relative, text)


def read_payload() -> Any:
    argv = sys.argv[1:]
    if argv:
        return json.loads(argv[0])
    if not sys.stdin.isatty():
        raw = sys.stdin.read().strip()
        if raw:
            return json.loads(raw)
    return {}


def main(tool_name: str, func: Callable[[dict], dict]) -> None:
    """Run `func(payload)`, wrap unexpected failures into a failed standard output, print it."""
    started = time.monotonic()
    try:
        result = func(read_payload())
    except (ToolInputError, ValueError) as exc:
        result = create_tool_output(tool_name, False, error=f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # the task runner's wrapping of unexpected errors
        result = create_tool_output(tool_name, False, error=f"unexpected {type(exc).__name__}: {exc}")
    if result.get("error"):
        result["error"] = confine_message(str(result["error"]))
    result["warnings"] = [confine_message(str(w)) for w in result.get("warnings") or []]
    result["execution_time"] = round(time.monotonic() - started, 4)
    print(json.dumps(result, ensure_ascii=False, indent=2))
    sys.exit(0 if result["status"] == "success" else 1)
