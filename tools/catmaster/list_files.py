#!/usr/bin/env python3
"""CatMaster tool `list_files`: list files of the user workspace.

Input: {"path": "." (workspace-relative dir), "pattern": "*" (glob, recursive), "max_entries": 500}
Data:  {"path", "files": [workspace-relative paths], "count", "truncated"}
The system view (`.catmaster/`, `.rondo/`) is never listed; neither is anything outside the
workspace: the pattern is relative to `path` and may not climb out of it (`..`, absolute), and
an entry that is a link leading out of the workspace is left out.
"""
from __future__ import annotations

from pathlib import PurePosixPath

from base import (ToolInputError, create_tool_output, in_system_view, inside_workspace, main,
                  resolve_workspace_path, validate, workspace_relpath, workspace_root)

TOOL = "list_files"
SCHEMA = {"path": (str, "."), "pattern": (str, "*"), "max_entries": (int, 500)}


def list_files(payload: dict) -> dict:
    params = validate(payload, SCHEMA)
    root = resolve_workspace_path(params["path"], must_exist=True)
    if not root.is_dir():
        return create_tool_output(TOOL, False, error=f"not a directory: {params['path']}")
    pattern = params["pattern"]
    parts = PurePosixPath(pattern).parts
    if not pattern or pattern.startswith("/") or ".." in parts:
        raise ToolInputError("pattern must be a glob relative to `path` (no `..`, not absolute)")
    found = (p for p in root.rglob(pattern) if inside_workspace(p) and not in_system_view(p))
    base = workspace_root()
    files = sorted(p.relative_to(base).as_posix() for p in found if p.is_file())
    limit = max(1, params["max_entries"])
    return create_tool_output(TOOL, True, data={
        "path": workspace_relpath(root), "files": files[:limit], "count": len(files), "truncated": len(files) > limit,
    })


if __name__ == "__main__":
    main(TOOL, list_files)
