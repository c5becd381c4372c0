#!/usr/bin/env python3
"""CatMaster tool `write_file`: write a text file into the user workspace.

Input: {"path": "notes/plan.md" (workspace-relative), "content": "...", "overwrite": true}
Data:  {"path" (workspace-relative), "bytes"}
"""
from __future__ import annotations

from base import create_tool_output, main, resolve_workspace_path, validate, workspace_relpath

TOOL = "write_file"
SCHEMA = {"path": (str, ...), "content": (str, ...), "overwrite": (bool, True)}


def write_file(payload: dict) -> dict:
    params = validate(payload, SCHEMA)
    path = resolve_workspace_path(params["path"])
    if path.exists() and not params["overwrite"]:
        return create_tool_output(TOOL, False, error=f"exists and overwrite is false: {params['path']}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(params["content"], encoding="utf-8")
    return create_tool_output(TOOL, True, data={"path": workspace_relpath(path), "bytes": len(params["content"].encode())})


if __name__ == "__main__":
    main(TOOL, write_file)
