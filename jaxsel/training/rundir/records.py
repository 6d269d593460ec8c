"""The one reader of a run directory's records: `read_run(path) -> RunRecords`.

Why one reader: `jaxsel report` (tolerant: any run directory, a line cut off by an
interruption skipped) and a long job's cells (strict: a damaged record is retrained, never
half-read) read the same files, and two parsers of one file drift. This reader decides
nothing: it reads every record once and says, per file, what it found (the JSON value), or
that the file is missing, not UTF-8 text, not JSON, or a JSON value of another kind than a
run writes there; the metrics' lines that are not JSON are listed with their line numbers.
Each caller turns those answers into its own policy (analysis/report.py tolerates what a
report may skip; analysis/cells.py refuses everything but a whole record) and its own words.
Nothing here raises on a damaged file, so each caller meets the problems in its own order.
A resume reads here too: its log line by line as written (`read_metric_rows`, for
metrics_file.py to cut back), and config.json and a checkpoint folder's owner file
(`read_record`, for owner.py), as do a job's records (job.json, cell.json, the cache's
seal) and the W&B run's id a resume continues (`read_text`).
"""
from __future__ import annotations

import dataclasses
import enum
import json
import os
from pathlib import Path
from typing import Any

from .names import RunDir


class Found(enum.Enum):
    """What reading one record file found."""
    VALUE = "value"           # a JSON value of the kind a run writes there
    MISSING = "missing"       # no such file (or not a file)
    UNREADABLE = "unreadable"  # there, but the OS refused to read it (e.g. no permission)
    NOT_TEXT = "not UTF-8"    # bytes that are not UTF-8 text
    NOT_JSON = "not JSON"     # text that is not one JSON value
    WRONG_KIND = "wrong kind"  # JSON of another kind (e.g. a list where a run writes an object)


@dataclasses.dataclass(frozen=True)
class Record:
    """One JSON record file as read: `value` when `found` is VALUE; otherwise `error` is the
    OS's or the decoder's error (UNREADABLE, NOT_TEXT, NOT_JSON) or `found_kind` the JSON
    type met (WRONG_KIND)."""
    path: Path
    kind: type
    found: Found
    value: Any = None
    error: Exception | None = None
    found_kind: str | None = None

    @property
    def ok(self) -> bool:
        return self.found is Found.VALUE


@dataclasses.dataclass(frozen=True)
class MetricLines:
    """metrics.jsonl as read: `rows` are (line number, JSON value) of its JSON lines; `cut`
    (line number, error) the non-blank lines that are not JSON (e.g. cut off by an
    interruption); `found` says whether the file was there and UTF-8 text at all."""
    path: Path
    found: Found
    rows: tuple[tuple[int, Any], ...] = ()
    cut: tuple[tuple[int, ValueError], ...] = ()
    error: Exception | None = None


@dataclasses.dataclass(frozen=True)
class RunRecords:
    """Every record of one run directory, each as read (see `Record`, `MetricLines`)."""
    path: Path
    metrics: MetricLines
    evals: Record
    final: Record
    config: Record
    strategy: Record


def read_record(path: str | os.PathLike, kind: type) -> Record:
    """The JSON file at `path`, expected to hold a value of type `kind` (dict or list)."""
    text = read_text(path)
    if not text.ok:
        return dataclasses.replace(text, kind=kind)
    try:
        value = json.loads(text.value)
    except (ValueError, RecursionError) as err:   # RecursionError: [[[[...]]]] thousands deep
        return Record(text.path, kind, Found.NOT_JSON, error=err)
    if not isinstance(value, kind):
        return Record(text.path, kind, Found.WRONG_KIND, found_kind=type(value).__name__)
    return Record(text.path, kind, Found.VALUE, value)


def read_text(path: str | os.PathLike) -> Record:
    """The text file at `path` (a record that is not JSON: the W&B run's id, a job cache's
    seal), its text as the value."""
    path = Path(path)
    if not path.is_file():
        return Record(path, str, Found.MISSING)
    try:
        return Record(path, str, Found.VALUE, path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        return Record(path, str, Found.NOT_TEXT, error=err)
    except OSError as err:
        return Record(path, str, Found.UNREADABLE, error=err)


def read_metric_lines(path: str | os.PathLike) -> MetricLines:
    """metrics.jsonl, one JSON value a line (blank lines are no rows)."""
    path = Path(path)
    if not path.is_file():
        return MetricLines(path, Found.MISSING)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        return MetricLines(path, Found.NOT_TEXT, error=err)
    except OSError as err:
        return MetricLines(path, Found.UNREADABLE, error=err)
    rows, cut = [], []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append((n, json.loads(line)))
        except ValueError as err:
            cut.append((n, err))
    return MetricLines(path, Found.VALUE, tuple(rows), tuple(cut))


def read_metric_rows(path: str | os.PathLike) -> list[tuple[int, bytes, dict | None]]:
    """metrics.jsonl line by line, for a resume that cuts it back to its checkpoint's step
    (metrics_file.py) and so needs each line's bytes as written: (line number, the line, newline
    included where it has one, the row: a JSON object with an integer step, or None where
    the line is not one). No file: no lines. An OS error reading it is raised: a resume that
    cannot read its log must not write it."""
    path = Path(path)
    if not path.exists():
        return []
    with open(path, "rb") as f:
        return [(number, line, _metric_row(line)) for number, line in enumerate(f, 1)]


def _metric_row(line: bytes) -> dict | None:
    try:
        row = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    ok = isinstance(row, dict) and isinstance(row.get("step"), int) and not isinstance(row["step"], bool)
    return row if ok else None


def read_run(path: str | os.PathLike) -> RunRecords:
    """Every record of the run directory `path`, read once, nothing refused or guessed."""
    files = RunDir(path)
    return RunRecords(files.path, read_metric_lines(files.metrics), read_record(files.evals, list),
                      read_record(files.final, dict), read_record(files.config, dict),
                      read_record(files.strategy, dict))
