"""
The finished runs of an experiment, gathered in one file, ``runs.jsonl``: one JSON record per line, holding what the
run produced and keyed by its ``run_id``. A run that finishes appends its record; the tables and figures are rebuilt
from the file, and a resumed experiment skips the runs it holds. A run trained again appends a new record, which
replaces the former one: the last record of a ``run_id`` counts.

- The learning experiments of :mod:`benchmarks.harness` record a run's ``status``, the fields of
  :data:`~benchmarks.harness.common.MANIFEST_FIELDS` and its evaluations as a table, ``{"columns": [...], "rows":
  [[...], ...]}`` (:func:`table`, :func:`table_rows`).
- :mod:`benchmarks.learning.zoo_table` records the result of each training command (its learning curve included).

NaN values are written as ``null`` (the file is strict JSON). The former layout, one file per run (``runs/<run_id>.json``,
or ``runs/<run_id>.csv`` with a ``manifest.csv``), is converted by::

    python -m benchmarks.harness.results_store --gather benchmarks/results

Finished records are committed compressed, ``runs.jsonl.gz`` (:func:`archive`), with their per-iteration diagnostics
optionally kept only on a grid of timesteps shared by all runs (``--diagnostics-grid``: an experiment comparing 1 and 16
environments then keeps one row per 16-environment iteration of each run), so that the repository stays within what a
GPU runner carries::

    python -m benchmarks.harness.results_store --archive benchmarks/results/batch_size_invariance/minatar5 \
        --diagnostics-grid 2048
"""

import argparse
import csv
import gzip
import json
import math
import os
import re
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

RUNS_FILE = "runs.jsonl"
"""The name of an experiment's gathered file, in its results directory."""

_INT = re.compile(r"[-+]?\d+")
_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?|[-+]?(nan|inf)", re.IGNORECASE)


def _json_safe(value: Any) -> Any:
    """``value`` with its NaN floats (at any depth of lists and dicts) replaced by None."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    return value


def encode(record: dict[str, Any]) -> str:
    """The line of ``record`` in the file (with its newline)."""
    return json.dumps(_json_safe(record), allow_nan=False) + "\n"


def append(path: Path, record: dict[str, Any]) -> None:
    """
    Append ``record`` (which must have a ``run_id``) to the file ``path``, creating it, in one write: processes
    appending to the same file do not interleave their records.
    """
    if "run_id" not in record:
        raise ValueError("a record needs a run_id")
    line = encode(record)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and path.stat().st_size:
        with open(path, "rb") as file:
            file.seek(-1, os.SEEK_END)
            if file.read(1) != b"\n":
                line = "\n" + line  # after a record cut short by a killed process: start a line of its own
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, line.encode())
    finally:
        os.close(descriptor)


def read(path: Path) -> list[dict[str, Any]]:
    """
    Every record of the file ``path`` in order (none when it does not exist), after those of its gzip archive
    ``<path>.gz`` when there is one (large records, e.g. per-iteration diagnostics, are committed compressed); a line
    cut short is skipped, with a warning.
    """
    archive = path.with_name(path.name + ".gz")
    lines = gzip.decompress(archive.read_bytes()).decode().splitlines() if archive.exists() else []
    if path.exists():
        lines += path.read_text().splitlines()
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            warnings.warn(f"{path}:{number}: not a JSON record (a write cut short?), skipped", stacklevel=2)
    return records


def latest(path: Path) -> dict[str, dict[str, Any]]:
    """The last record of each ``run_id`` in the file ``path``, by run id."""
    return {record["run_id"]: record for record in read(path)}


def on_grid(record: dict[str, Any], grid: int) -> dict[str, Any]:
    """
    ``record`` with only the rows of its ``diagnostics`` table whose ``timesteps`` is a multiple of ``grid`` (a record
    without diagnostics is returned as it is); the record says so in ``diagnostics_grid``. A record already on a grid
    goes to a multiple of it only (the rows in between are gone).
    """
    if grid < 1:
        raise ValueError(f"grid={grid}: a number of timesteps, 1 or more")
    previous = record.get("diagnostics_grid")
    if previous is not None and grid % previous != 0:
        raise ValueError(
            f"run {record.get('run_id')}: its diagnostics are every {previous} steps; grid={grid} is not a multiple"
        )
    data = record.get("diagnostics")
    if not data or not data.get("rows"):
        return record
    column = data["columns"].index("timesteps")
    rows = [row for row in data["rows"] if row[column] % grid == 0]
    return {**record, "diagnostics": {"columns": data["columns"], "rows": rows}, "diagnostics_grid": grid}


def archive(directory: Path, diagnostics_grid: int | None = None) -> Path:
    """
    Move the finished runs of ``directory/runs.jsonl`` into its archive ``runs.jsonl.gz``: each ``run_id``'s last
    record (:func:`latest`, over both files) goes to the archive when it is finished, with its diagnostics on
    ``diagnostics_grid`` (:func:`on_grid`) when given; the last records of the runs that did not finish stay in
    ``runs.jsonl``; earlier records of a run, which its last one replaces, are dropped. The archive is written
    reproducibly (no time stamp) and checked by reading it back before ``runs.jsonl`` is rewritten. Not while runs
    append to ``runs.jsonl``.

    :return: the archive
    :raises FileNotFoundError: when ``directory`` holds neither file
    """
    path, target = directory / RUNS_FILE, directory / (RUNS_FILE + ".gz")
    if not path.exists() and not target.exists():
        raise FileNotFoundError(f"{directory}: no {RUNS_FILE} and no {target.name} to archive")
    last = latest(path)
    finished = [record for record in last.values() if record.get("status", "finished") == "finished"]
    others = [record for record in last.values() if record.get("status", "finished") != "finished"]
    if diagnostics_grid is not None:
        finished = [on_grid(record, diagnostics_grid) for record in finished]
    content = "".join(encode(record) for record in finished).encode()
    written = target.with_name(target.name + ".tmp")
    written.write_bytes(gzip.compress(content, mtime=0))
    if gzip.decompress(written.read_bytes()) != content:
        written.unlink()
        raise RuntimeError(f"{target}: the archive read back differs; nothing changed")
    written.replace(target)
    if others:
        path.write_text("".join(encode(record) for record in others))
    else:
        path.unlink(missing_ok=True)
    return target


# ----------------------------------------------------------------------------------------------------------------------
# tables (the evaluations of a run)


def parse_cell(text: str) -> Any:
    """A CSV cell as its value: an int, a float (NaN included), None when empty, else the text."""
    if text == "":
        return None
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)
    return text


def table(rows: Sequence[dict[str, str]], columns: Sequence[str] | None = None) -> dict[str, list[Any]]:
    """
    The rows of a CSV file (as :func:`csv.DictReader` reads them) as a table of values, ``{"columns": [...], "rows":
    [[...], ...]}``; cells are converted by :func:`parse_cell`.

    :param columns: the header (default: the first row's keys)
    """
    columns = list(columns if columns is not None else (rows[0] if rows else []))
    return {"columns": columns, "rows": [[parse_cell(row.get(column) or "") for column in columns] for row in rows]}


def table_rows(data: dict[str, list[Any]]) -> list[list[Any]]:
    """The rows of a table from the file, its ``null`` cells back to NaN (as a CSV reader reads an empty cell)."""
    return [[math.nan if cell is None else cell for cell in row] for row in data["rows"]]


# ----------------------------------------------------------------------------------------------------------------------
# converting the layout of one file per run

_MANIFEST_TYPES: dict[str, type] = {
    "n_envs": int,
    "seed": int,
    "timesteps": int,
    "wall_time": float,
    "steps_per_second": float,
    "final_return": float,
}
"""The fields of ``manifest.csv`` that are numbers (the others, ``spec_hash`` included, are text)."""


def _read_csv(path: Path) -> tuple[list[dict[str, str]], list[str]]:
    """The rows of a CSV file and its header."""
    with open(path, newline="") as file:
        reader = csv.DictReader(file)
        return list(reader), list(reader.fieldnames or [])


def _manifest_record(row: dict[str, str]) -> dict[str, Any]:
    record: dict[str, Any] = {"status": "finished"}
    for key, text in row.items():
        kind = _MANIFEST_TYPES.get(key)
        record[key] = text if kind is None else kind(text)
        if str(record[key]) != text:
            raise ValueError(f"manifest field {key}={text!r} would not be kept as written")
    return record


def harness_records(directory: Path) -> list[dict[str, Any]]:
    """
    The records of a learning experiment's directory in the former layout: one per row of ``manifest.csv`` (the last
    row of a run id), with the evaluations of ``runs/<run_id>.csv``; then, with ``status: "unfinished"``, the
    evaluations of runs the manifest does not have (started, never finished), sorted by run id.
    """
    manifest, _ = _read_csv(directory / "manifest.csv")
    rows = {row["run_id"]: row for row in manifest}
    records = []
    for run_id, row in rows.items():
        record = _manifest_record(row)
        path = directory / "runs" / f"{run_id}.csv"
        record["evaluations"] = table(*_read_csv(path)) if path.exists() else table([])
        records.append(record)
    for path in sorted((directory / "runs").glob("*.csv")):
        if path.stem not in rows:
            records.append({"status": "unfinished", "run_id": path.stem, "evaluations": table(*_read_csv(path))})
    return records


def zoo_records(directory: Path) -> list[dict[str, Any]]:
    """The records of a :mod:`benchmarks.learning.zoo_table` experiment in the former layout: each
    ``runs/<run_id>.json``, as it is, in the order of the file names."""
    records = []
    for path in sorted((directory / "runs").glob("*.json")):
        record = json.loads(path.read_text())
        if record.get("run_id") != path.stem:
            raise ValueError(f"{path}: its run_id is {record.get('run_id')!r}")
        records.append(record)
    return records


def _same(left: Any, right: Any) -> bool:
    """Equality, NaN equal to NaN and to None (as the file writes it)."""
    if isinstance(left, float) and math.isnan(left):
        return right is None or (isinstance(right, float) and math.isnan(right))
    if isinstance(left, dict):
        return isinstance(right, dict) and left.keys() == right.keys() and all(_same(left[k], right[k]) for k in left)
    if isinstance(left, (list, tuple)):
        return isinstance(right, list) and len(left) == len(right) and all(map(_same, left, right))
    return type(left) is type(right) and left == right


def gather(directory: Path, remove: bool = False) -> Path | None:
    """
    Convert one experiment's directory from one file per run to ``runs.jsonl`` (checked by reading it back), and with
    ``remove`` delete the files it replaces (``runs/``, ``manifest.csv``).

    :return: the written file, None when ``directory`` has no per-run files
    :raises FileExistsError: when ``runs.jsonl`` already exists
    """
    runs = directory / "runs"
    if not runs.is_dir() or not (any(runs.glob("*.json")) or any(runs.glob("*.csv"))):
        return None
    path = directory / RUNS_FILE
    if path.exists():
        raise FileExistsError(f"{path} exists: gather only once")
    harness = (directory / "manifest.csv").exists()
    records = harness_records(directory) if harness else zoo_records(directory)
    path.write_text("".join(encode(record) for record in records))
    if not _same(records, read(path)):
        path.unlink()
        raise RuntimeError(f"{path}: the records read back differ from the files; nothing converted")
    if remove:
        for file in [*runs.glob("*.json"), *runs.glob("*.csv")]:
            file.unlink()
        if not any(runs.iterdir()):
            runs.rmdir()
        if harness:
            (directory / "manifest.csv").unlink()
    return path


def gather_all(root: Path, remove: bool = False) -> list[Path]:
    """:func:`gather` every experiment directory under ``root`` (those holding a ``runs/`` folder)."""
    written = (gather(runs.parent, remove) for runs in sorted(root.rglob("runs")) if runs.is_dir())
    return [path for path in written if path is not None]


def main(argv: Iterable[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.harness.results_store", description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--gather", type=Path, metavar="ROOT", help="convert every experiment under ROOT")
    action.add_argument("--archive", type=Path, metavar="DIR", help=f"move DIR/{RUNS_FILE}'s finished records into its .gz")
    parser.add_argument("--keep", action="store_true", help="keep the per-run files (default: delete them once gathered)")
    parser.add_argument("--diagnostics-grid", type=int, metavar="STEPS", help="with --archive: keep diagnostics every STEPS")
    args = parser.parse_args(None if argv is None else list(argv))
    if args.diagnostics_grid is not None and args.archive is None:
        parser.error("--diagnostics-grid goes with --archive")
    if args.diagnostics_grid is not None and args.diagnostics_grid < 1:
        parser.error(f"--diagnostics-grid {args.diagnostics_grid}: a number of timesteps, 1 or more")
    if args.archive is not None:
        target = archive(args.archive, args.diagnostics_grid)
        print(f"{target}: {len(read(args.archive / RUNS_FILE))} runs")
        return [target]
    written = gather_all(args.gather, remove=not args.keep)
    for path in written:
        print(f"{path}: {len(read(path))} runs")
    return written


if __name__ == "__main__":
    main()
