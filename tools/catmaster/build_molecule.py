#!/usr/bin/env python3
"""CatMaster tool `build_molecule`: write a gas-phase molecule as an extended-XYZ file.

Input: {"molecule": "CO" | "CO2" | "H2" | "H2O" | "N2" | "NH3" | "O2" | "CH4",
        "output_dir": "structures/molecules" (workspace-relative), "box": 15.0 (cubic cell, Angstrom)}
Data:  {"xyz_rel" (workspace-relative path), "formula", "n_atoms", "box"}
Deterministic: fixed reference geometries (Angstrom), no timestamps in names.
"""
from __future__ import annotations

from base import create_tool_output, main, resolve_workspace_path, validate, workspace_relpath

TOOL = "build_molecule"
SCHEMA = {"molecule": (str, ...), "output_dir": (str, "structures/molecules"), "box": ((int, float), 15.0)}

GEOMETRIES = {
    "H2": [("H", 0, 0, 0), ("H", 0, 0, 0.741)],
    "O2": [("O", 0, 0, 0), ("O", 0, 0, 1.208)],
    "N2": [("N", 0, 0, 0), ("N", 0, 0, 1.098)],
    "CO": [("C", 0, 0, 0), ("O", 0, 0, 1.128)],
    "CO2": [("O", 0, 0, -1.160), ("C", 0, 0, 0), ("O", 0, 0, 1.160)],
    "H2O": [("O", 0, 0, 0.1173), ("H", 0, 0.7572, -0.4692), ("H", 0, -0.7572, -0.4692)],
    "NH3": [("N", 0, 0, 0.1162), ("H", 0, 0.9377, -0.2711), ("H", 0.8121, -0.4689, -0.2711),
            ("H", -0.8121, -0.4689, -0.2711)],
    "CH4": [("C", 0, 0, 0), ("H", 0.629, 0.629, 0.629), ("H", -0.629, -0.629, 0.629),
            ("H", -0.629, 0.629, -0.629), ("H", 0.629, -0.629, -0.629)],
}


def hill_formula(symbols: list[str]) -> str:
    counts: dict[str, int] = {}
    for s in symbols:
        counts[s] = counts.get(s, 0) + 1
    if "C" in counts:
        order = ["C"] + (["H"] if "H" in counts else []) + sorted(k for k in counts if k not in ("C", "H"))
    else:
        order = sorted(counts)
    return "".join(f"{el}{counts[el] if counts[el] > 1 else ''}" for el in order)


def build_molecule(payload: dict) -> dict:
    params = validate(payload, SCHEMA)
    name = params["molecule"].strip()
    if name not in GEOMETRIES:
        return create_tool_output(TOOL, False, error=f"unknown molecule {name!r}; known: {', '.join(sorted(GEOMETRIES))}")
    box = float(params["box"])
    if not 5.0 <= box <= 50.0:
        return create_tool_output(TOOL, False, error="box must be between 5 and 50 Angstrom")
    out_dir = resolve_workspace_path(params["output_dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    atoms = GEOMETRIES[name]
    half = box / 2
    lines = [str(len(atoms)),
             f'Lattice="{box} 0.0 0.0 0.0 {box} 0.0 0.0 0.0 {box}" Properties=species:S:1:pos:R:3 pbc="T T T"']
    lines += [f"{el:2s} {x + half:12.6f} {y + half:12.6f} {z + half:12.6f}" for el, x, y, z in atoms]
    out_file = out_dir / f"{name}.xyz"
    out_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return create_tool_output(TOOL, True, data={
        "xyz_rel": workspace_relpath(out_file), "formula": hill_formula([a[0] for a in atoms]),
        "n_atoms": len(atoms), "box": box,
    })


if __name__ == "__main__":
    main(TOOL, build_molecule)
