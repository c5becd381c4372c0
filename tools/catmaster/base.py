"""Shared helpers for the CatMaster tools (standard library only).

Every tool:
  - validates its payload against a small schema that rejects extra fields strictly
    (the Pydantic `InputModel(**payload)` step of the reference),
  - works in the USER VIEW: paths are workspace-relative; `.catmaster/` (the system view)
    cannot be read or written through a tool,
  - returns (prints) the standard output of `create_tool_output`:
    {status, tool_name, data, warnings, error, execution_time}.

The workspace root is $CATMASTER_WORKSPACE when set, else the current directory
(Rondo runs tool roles with the run directory as the working directory).
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

SYSTEM_DIR = ".catmaster"


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
    target = (root / rel).resolve()
    if target != root and root not in target.parents:
        raise ToolInputError(f"path escapes the workspace: {rel}")
    if target != root and target.relative_to(root).parts[0] == SYSTEM_DIR:
        raise ToolInputError(f"{SYSTEM_DIR}/ is the system view; tools work in the user view: {rel}")
    if must_exist and not target.exists():
        raise ToolInputError(f"path does not exist: {rel}")
    return target


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
    result["execution_time"] = round(time.monotonic() - started, 4)
    print(json.dumps(result, ensure_ascii=False, indent=2))
    sys.exit(0 if result["status"] == "success" else 1)
