#!/usr/bin/env python3
"""DS-STAR analyzer tool: describe every file under a data directory.

Arguments (JSON object as the first argument, or on stdin, or `--data_dir DIR`):
    {"data_dir": "data", "max_files": 200, "sample_lines": 5}

Prints one JSON object in the standard tool-result shape
    {status, tool_name, data, warnings, error, execution_time}
whose `data` is the reference's descriptions: {"files": {path as scripts open it: description},
"warnings": [...]}. A missing or empty data folder is a warning there, never a silent `{}`. The
workflow stores it in memory (`descriptions`) and writes it to `descriptions.json`.
Standard library only; deterministic for identical inputs (files are sorted).
"""
from __future__ import annotations

import csv
import json
import sqlite3
import sys
import time
import zipfile
from pathlib import Path

TOOL_NAME = "describe_files"
TEXT_SUFFIXES = {".txt", ".md", ".log", ".py", ".yaml", ".yml", ".toml", ".ini", ".cfg", ".xml", ".html"}
TABULAR = {".csv": ",", ".tsv": "\t"}


def read_args() -> dict:
    """Tool arguments: a JSON object in argv[1], else JSON on stdin, else --key value pairs."""
    argv = sys.argv[1:]
    if argv and argv[0].lstrip().startswith("{"):
        return json.loads(argv[0])
    if argv:
        args: dict = {}
        it = iter(argv)
        for token in it:
            if token.startswith("--"):
                key, _, value = token[2:].partition("=")
                args[key] = value if _ else next(it, "")
            else:
                args.setdefault("data_dir", token)
        return args
    if not sys.stdin.isatty():
        raw = sys.stdin.read().strip()
        if raw:
            return json.loads(raw)
    return {}


def emit(success: bool, data: dict, error: str | None, started: float) -> None:
    """One line, as the other tools print theirs: the run shows it as it comes. What the
    data folder lacks is said once, in the descriptions (`data.warnings`) the prompts read;
    the tool itself has nothing to warn about."""
    print(json.dumps({
        "status": "success" if success else "failed",
        "tool_name": TOOL_NAME,
        "data": data,
        "warnings": [],
        "error": error,
        "execution_time": round(time.monotonic() - started, 4),
    }, ensure_ascii=False))


def head_lines(path: Path, n: int) -> list[str]:
    lines = []
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            lines.append(line.rstrip("\n")[:300])
            if len(lines) >= n:
                break
    return lines


def count_lines(path: Path) -> int:
    with path.open("rb") as fh:
        return sum(1 for _ in fh)


def describe_tabular(path: Path, delimiter: str, sample: int) -> dict:
    with path.open("r", encoding="utf-8", errors="replace", newline="") as fh:
        reader = csv.reader(fh, delimiter=delimiter)
        header = next(reader, [])
        rows = []
        n_rows = 0
        missing = [0] * len(header)
        numeric = [True] * len(header)
        for row in reader:
            n_rows += 1
            if len(rows) < sample:
                rows.append(row)
            for i, cell in enumerate(row[: len(header)]):
                if cell.strip() == "":
                    missing[i] += 1
                elif numeric[i]:
                    try:
                        float(cell)
                    except ValueError:
                        numeric[i] = False
    columns = [
        {"name": name, "type": "number" if numeric[i] else "string", "missing": missing[i]}
        for i, name in enumerate(header)
    ]
    return {"columns": columns, "rows": n_rows, "sample_rows": rows}


def describe_json(path: Path) -> dict:
    value = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(value, dict):
        return {"json_type": "object", "keys": list(value)[:50]}
    if isinstance(value, list):
        first = value[0] if value else None
        keys = list(first)[:50] if isinstance(first, dict) else None
        return {"json_type": "array", "length": len(value), "item_keys": keys}
    return {"json_type": type(value).__name__, "value": value}


def describe_sqlite(path: Path, sample: int) -> dict:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {}
        for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name"):
            cols = [r[1] for r in con.execute(f'PRAGMA table_info("{name}")')]
            count = con.execute(f'SELECT COUNT(*) FROM "{name}"').fetchone()[0]
            rows = con.execute(f'SELECT * FROM "{name}" LIMIT {int(sample)}').fetchall()
            tables[name] = {"columns": cols, "rows": count, "sample_rows": [list(map(str, r)) for r in rows]}
        return {"tables": tables}
    finally:
        con.close()


def describe_one(path: Path, sample: int) -> dict:
    suffix = path.suffix.lower()
    info: dict = {"size_bytes": path.stat().st_size, "type": suffix.lstrip(".") or "unknown"}
    try:
        if suffix in TABULAR:
            info.update(describe_tabular(path, TABULAR[suffix], sample))
        elif suffix == ".json":
            info.update(describe_json(path))
        elif suffix in {".sqlite", ".sqlite3", ".db"}:
            info.update(describe_sqlite(path, sample))
        elif suffix == ".zip":
            with zipfile.ZipFile(path) as zf:
                info["entries"] = zf.namelist()[:100]
        elif suffix in TEXT_SUFFIXES or suffix == "":
            info.update({"lines": count_lines(path), "head": head_lines(path, sample)})
        else:
            info["note"] = "binary or unsupported type; not opened"
    except Exception as exc:  # describe as much as possible, never abort the run
        info["error"] = f"FAILED TO DESCRIBE: {type(exc).__name__}: {exc}"
    return info


def main() -> int:
    started = time.monotonic()
    try:
        args = read_args()
    except ValueError as exc:
        emit(False, {"files": {}, "warnings": []}, f"invalid arguments: {exc}", started)
        return 2
    data_dir = Path(str(args.get("data_dir", "data")))
    max_files = int(args.get("max_files", 200))
    sample = int(args.get("sample_lines", 5))
    warnings: list[str] = []
    if not data_dir.exists():
        warnings.append(f"data directory {data_dir} does not exist: no files described")
        emit(True, {"files": {}, "warnings": warnings}, None, started)
        return 0
    files = [data_dir] if data_dir.is_file() else sorted(p for p in data_dir.rglob("*") if p.is_file())
    if not files:
        warnings.append(f"data directory {data_dir} is empty: no files described")
    if len(files) > max_files:
        warnings.append(f"{len(files)} files found; only the first {max_files} described")
        files = files[:max_files]
    # keys are paths as the generated scripts must open them (cwd = run directory)
    descriptions = {p.as_posix(): describe_one(p, sample) for p in files}
    emit(True, {"files": descriptions, "warnings": warnings}, None, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
