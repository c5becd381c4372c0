#!/usr/bin/env python3
"""CatMaster tool `read_file`: read a text file of the user workspace.

Input: {"path": "outputs/x.json" (workspace-relative), "max_chars": 20000}
Data:  {"path", "content", "chars", "truncated"}
"""
from __future__ import annotations

from base import create_tool_output, main, resolve_workspace_path, validate, workspace_relpath

TOOL = "read_file"
SCHEMA = {"path": (str, ...), "max_chars": (int, 20000)}


def read_file(payload: dict) -> dict:
    params = validate(payload, SCHEMA)
    path = resolve_workspace_path(params["path"], must_exist=True)
    if not path.is_file():
        return create_tool_output(TOOL, False, error=f"not a file: {params['path']}")
    text = path.read_text(encoding="utf-8", errors="replace")
    limit = max(0, params["max_chars"])
    warnings = [f"truncated to {limit} of {len(text)} characters"] if len(text) > limit else []
    return create_tool_output(TOOL, True, data={
        "path": workspace_relpath(path), "content": text[:limit], "chars": len(text), "truncated": len(text) > limit,
    }, warnings=warnings)


if __name__ == "__main__":
    main(TOOL, read_file)
