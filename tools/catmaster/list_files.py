#!/usr/bin/env python3
"""CatMaster tool `list_files`: list files of the user workspace.

Input: {"path": "." (workspace-relative dir), "pattern": "*" (glob, recursive), "max_entries": 500}
Data:  {"path", "files": [workspace-relative paths], "count", "truncated"}
`.catmaster/` (system view) is never listed.
"""
from __future__ import annotations

from base import SYSTEM_DIR, create_tool_output, main, resolve_workspace_path, validate, workspace_relpath

TOOL = "list_files"
SCHEMA = {"path": (str, "."), "pattern": (str, "*"), "max_entries": (int, 500)}


def list_files(payload: dict) -> dict:
    params = validate(payload, SCHEMA)
    root = resolve_workspace_path(params["path"], must_exist=True)
    if not root.is_dir():
        return create_tool_output(TOOL, False, error=f"not a directory: {params['path']}")
    rels = (workspace_relpath(p) for p in root.rglob(params["pattern"]) if p.is_file())
    files = sorted(r for r in rels if r.split("/")[0] != SYSTEM_DIR)
    limit = max(1, params["max_entries"])
    return create_tool_output(TOOL, True, data={
        "path": workspace_relpath(root), "files": files[:limit], "count": len(files), "truncated": len(files) > limit,
    })


if __name__ == "__main__":
    main(TOOL, list_files)
