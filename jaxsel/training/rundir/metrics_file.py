"""The one writer of metrics.jsonl, a run's per-step rows: `MetricsFile`.

Why apart from `write.py`: the other records are written whole and atomically; this one
grows a window at a time (flushed per window, so a killed run loses no written row), and a
resume cuts it back to the checkpoint's step first. The rows are `json.dumps` of each row
(`write.jsonable`), one a line.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from .links import open_own
from .records import read_metric_rows
from .write import write_new, jsonable


class MetricsFile:
    """metrics.jsonl, appended to and flushed per write.

    Resuming at step `start` keeps every row of an earlier step and drops the rows of steps
    >= `start`, which the resumed run writes again (equal), so the resumed log equals an
    uninterrupted one. No earlier row is ever cut: a line that is not a row is named in one
    warning and kept aside in metrics.jsonl.bad, the rows after it stay, and earlier steps
    with no row (a log cut short, or lost) are named in one warning. A last line cut off
    mid-write (no newline) is the interruption itself and goes without a word.
    A `writers.MetricWriter`; evaluations go to evals.json (train.py), not here."""

    def __init__(self, path: Path, start: int):
        self.path = path
        self.earlier = self._resume(start) if start else []
        if not start:
            write_new(path, b"")
        self.file = os.fdopen(open_own(path, os.O_WRONLY | os.O_APPEND), "a", encoding="utf-8")

    def _resume(self, start: int) -> list[dict]:
        existed = self.path.exists()
        kept, bad, prefix = _read_rows(self.path, start)
        if bad:
            aside = self.path.with_name(self.path.name + ".bad")
            with os.fdopen(open_own(aside, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab") as f:
                f.write(b"".join(line for _, line in bad))
            _warn(f"{self.path} line(s) {_spans([i for i, _ in bad])} are not metrics rows: kept aside in "
                  f"{aside.name}; the rows after them are kept")
        if not existed:
            write_new(self.path, b"")
        elif prefix is not None:   # the kept rows are the file's beginning: cut after them, in place
            with os.fdopen(open_own(self.path, os.O_WRONLY | os.O_APPEND), "ab") as f:
                f.truncate(prefix)
                if kept and not kept[-1][1].endswith(b"\n"):
                    f.write(b"\n")
        else:                      # rows to keep after a dropped line: write them anew, atomically
            tmp = self.path.with_name(f".{self.path.name}.tmp")
            write_new(tmp, b"".join(line.rstrip(b"\n") + b"\n" for _, line in kept))
            os.replace(tmp, self.path)
        rows = [row for row, _ in kept]
        missing = _missing_steps(sorted(r["step"] for r in rows), start)
        if missing:
            what = "has no rows for" if existed else "is missing: no rows for"
            _warn(f"{self.path} {what} step(s) {_spans(missing)} before the checkpoint of step {start}; "
                  f"they stay missing, the log continues at step {start}")
        return rows

    def write(self, rows: list[dict]) -> None:
        try:
            self.file.write("".join(json.dumps(jsonable(r)) + "\n" for r in rows))
            self.file.flush()
        except OSError as err:   # a full disk: say which file
            raise OSError(err.errno, err.strerror, str(self.path)) from None

    def write_eval(self, row: dict) -> None:
        pass

    def close(self) -> None:
        try:
            self.file.close()   # flushes what a failed write left in the buffer: it fails again
        except OSError as err:
            raise OSError(err.errno, err.strerror, str(self.path)) from None


def _read_rows(path: Path, start: int) -> tuple[list[tuple[dict, bytes]], list[tuple[int, bytes]], int | None]:
    """(the rows of steps < `start` with their lines, the lines that are not rows with their
    numbers, and the length of the file's beginning made of exactly the kept lines: None
    when a dropped line lies before a kept one)."""
    kept, bad, dropped, broken, length = [], [], False, False, 0
    for number, line, row in read_metric_rows(path):
        if row is not None and row["step"] < start:
            kept.append((row, line))
            length += len(line)
            broken |= dropped
            continue
        dropped = True
        if row is None and line.endswith(b"\n"):   # an unterminated last line: the interruption
            bad.append((number, line))
    return kept, bad, None if broken else length


def _missing_steps(steps: list[int], start: int) -> list[int]:
    """The steps 0..start-1 absent from sorted `steps`, as [first, last] pairs of runs."""
    spans, expect = [], 0
    for step in steps + [start]:
        if step > expect:
            spans.append([expect, min(step, start) - 1])
        expect = max(expect, step + 1)
    return spans


def _spans(items: list) -> str:
    """'3, 50-139' from line numbers or [first, last] runs; long lists are shortened."""
    text = [f"{a}-{b}" if a != b else f"{a}" for a, b in (i if isinstance(i, list) else (i, i) for i in items)]
    return ", ".join(text[:8]) + (f" and {len(text) - 8} more" if len(text) > 8 else "")


def _warn(text: str) -> None:
    print(f"jaxsel: warning: {text}", file=sys.stderr, flush=True)
