#!/usr/bin/env python3
"""CatMaster batch tool `xyz_summary_batch`: summarize every .xyz structure under a directory.

Input: {"input_dir": "structures" (workspace-relative), "output_dir": "outputs/xyz_summary"}
Data:  {"summary_json_rel", "counts": {"found", "summarized", "failed"}}

Batch rules of the reference (section 5.5): output_dir is never inside input_dir; `.catmaster/`
and staging folders (`*_batch_*`) are excluded from scanning; outputs are isolated from inputs;
the mapping input -> output is deterministic and one-to-one: the path relative to input_dir is
flattened with `__` between folders (`sub/a.xyz` -> `per_structure/sub__a.json`), after escaping
what would make two inputs meet (`%` -> `%25`, and an `_` next to another `_` or at either end
of a name -> `%5F`, so `sub__a.xyz` -> `per_structure/sub%5F%5Fa.json`). Per-structure results
go to `per_structure/`, beside the aggregate `summary.json`, so no input name can overwrite it.
Large results go to files; the tool returns the workspace-relative path of the summary JSON.
"""
from __future__ import annotations

import fnmatch
import json
import math

from base import (is_system_part, create_tool_output, in_system_view, inside_workspace, main,
                  resolve_workspace_path, validate, workspace_relpath, workspace_root)

TOOL = "xyz_summary_batch"
SCHEMA = {"input_dir": (str, ...), "output_dir": (str, "outputs/xyz_summary")}
PER_STRUCTURE = "per_structure"


def escape_name(name: str) -> str:
    """One path component, escaped so that it holds no `__` and neither starts nor ends with
    `_`: joined with `__`, the components can be told apart again (the mapping is injective)."""
    name = name.replace("%", "%25")
    out = []
    for i, c in enumerate(name):
        lonely = 0 < i < len(name) - 1 and name[i - 1] != "_" and name[i + 1] != "_"
        out.append(c if c != "_" or lonely else "%5F")
    return "".join(out)


def flat_name(rel_parts: tuple[str, ...]) -> str:
    """`("sub", "a.xyz")` -> `sub__a.json`."""
    *folders, file = rel_parts
    stem = file.removesuffix(".xyz")
    return "__".join(escape_name(p) for p in (*folders, stem)) + ".json"


def parse_xyz(text: str) -> list[tuple[str, float, float, float]]:
    lines = text.splitlines()
    n = int(lines[0].split()[0])
    atoms = []
    for line in lines[2:2 + n]:
        parts = line.split()
        atoms.append((parts[0], float(parts[1]), float(parts[2]), float(parts[3])))
    if len(atoms) != n:
        raise ValueError(f"expected {n} atoms, found {len(atoms)}")
    return atoms


def summarize(atoms) -> dict:
    counts: dict[str, int] = {}
    for el, *_ in atoms:
        counts[el] = counts.get(el, 0) + 1
    center = [round(sum(a[i] for a in atoms) / len(atoms), 6) for i in (1, 2, 3)]
    dmax = max((math.dist(a[1:], b[1:]) for i, a in enumerate(atoms) for b in atoms[i + 1:]), default=0.0)
    return {"n_atoms": len(atoms), "elements": dict(sorted(counts.items())), "center": center,
            "max_distance": round(dmax, 6)}


def xyz_summary_batch(payload: dict) -> dict:
    params = validate(payload, SCHEMA)
    in_dir = resolve_workspace_path(params["input_dir"], must_exist=True)
    out_dir = resolve_workspace_path(params["output_dir"])
    if out_dir == in_dir or in_dir in out_dir.parents:
        return create_tool_output(TOOL, False, error="output_dir must not be inside input_dir")
    inputs = []
    for path in sorted(in_dir.rglob("*.xyz")):
        rel_parts = path.relative_to(in_dir).parts
        if any(is_system_part(p) for p in rel_parts) or any(fnmatch.fnmatch(p, "*_batch_*") for p in rel_parts[:-1]):
            continue
        if out_dir in path.parents or not path.is_file():
            continue
        # a link leading out of the workspace (or into the system view) is not an input
        if not inside_workspace(path) or in_system_view(path):
            continue
        inputs.append(path)
    per_structure = out_dir / PER_STRUCTURE
    per_structure.mkdir(parents=True, exist_ok=True)
    results, warnings, failed = {}, [], 0
    for path in inputs:
        rel_parts = path.relative_to(in_dir).parts
        name = in_dir.relative_to(workspace_root()).joinpath(*rel_parts).as_posix()
        try:
            summary = summarize(parse_xyz(path.read_text(encoding="utf-8")))
        except (ValueError, IndexError) as exc:
            failed += 1
            warnings.append(f"{name}: {exc}")
            continue
        out_file = per_structure / flat_name(rel_parts)
        out_file.write_text(json.dumps(summary, ensure_ascii=False, indent=2), encoding="utf-8")
        results[name] = {"summary_rel": workspace_relpath(out_file), **summary}
    summary_file = out_dir / "summary.json"
    summary_file.write_text(json.dumps(results, ensure_ascii=False, indent=2), encoding="utf-8")
    return create_tool_output(TOOL, True, data={
        "summary_json_rel": workspace_relpath(summary_file),
        "counts": {"found": len(inputs), "summarized": len(results), "failed": failed},
    }, warnings=warnings)


if __name__ == "__main__":
    main(TOOL, xyz_summary_batch)
