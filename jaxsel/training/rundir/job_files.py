"""A long job's own files, read and written one way: job.json, derived_points.json,
calibration.json, frontier.json, task.json and report.json (`JobFile`, `read_job_file`,
`write_job_file`), and any job record read strictly (`read_strict`, a cell's cell.json too).

Why here: these files are a job's state. A resume continues from job.json and
derived_points.json, and `jaxsel report` remakes the tables from job.json and
calibration.json. Each was read by the module that wrote it: derived_points.json with a
raw `json.loads`, calibration.json with a type check of its own. So a damaged file or one
another hand left there met a different answer in each (a KeyError, "has not finished",
a traceback). Here every one is read the same strict way (records.py reads and decides
nothing): missing is None, not written yet. A file that is not UTF-8 JSON is damaged, and
one whose JSON is not that record is foreign (another kind of value, or its fields
missing or of other types). Both end in one line (`DamagedRecord`, exit 2) that names the
file and what to do; such a file is never half-read. Each file is written through the
same `JobFile` its reader checks, atomically (write.py). A job writes its files under its
directory's lock (lock.py, analysis/shard.py); `jaxsel report` takes that lock to remake a
job's tables. report.json sits beside runs that may still be training, so it is written
atomically and without the lock.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from ..config import ConfigError
from .names import CALIBRATION_FILE, DERIVED_FILE, FRONTIER_FILE, JOB_FILE, REPORT_FILE, TASK_FILE
from .records import Found, Record, read_record
from .write import write_record

#: JSON numbers as Python reads them back
NUMBER = (int, float)


class DamagedRecord(ConfigError):
    """A job's file that is not valid JSON, or not the record it should be (one line, exit 2)."""


@dataclasses.dataclass(frozen=True)
class JobFile:
    """One of a job's files: its name, what it is called in messages, and the fields (name
    -> JSON type) every such record holds."""
    name: str
    what: str
    fields: dict = dataclasses.field(default_factory=dict)

    def path(self, out: str | os.PathLike) -> Path:
        return Path(out) / self.name

    def problem(self, value) -> str | None:
        """Why `value` is not this record (None: it is)."""
        if not isinstance(value, dict):
            return f"holds a JSON {_json_type(value)}, not an object"
        missing = [k for k in self.fields if k not in value]
        if missing:
            return f"has no {', '.join(missing)}"
        wrong = next((k for k, kind in self.fields.items() if not isinstance(value[k], kind)
                      or isinstance(value[k], bool) and bool not in _types(kind)), None)
        if wrong is not None:
            return f"holds a JSON {_json_type(value[wrong])} as {wrong}"
        return None


JOB = JobFile(JOB_FILE, "job record", {"kind": str, "settings": dict, "code": dict})
DERIVED = JobFile(DERIVED_FILE, "record of derived points", {"points": dict})
CALIBRATION = JobFile(CALIBRATION_FILE, "calibration", {"setting": str, "window": int, "alpha": NUMBER,
                                                        "delta": NUMBER, "seeds": list, "statistics": dict})
FRONTIER = JobFile(FRONTIER_FILE, "frontier", {"setting": str, "seeds": list, "levels": list, "verdict": list,
                                               "methods": list, "task_file": str})
TASK = JobFile(TASK_FILE, "task")
REPORT = JobFile(REPORT_FILE, "report", {"networks": list, "runs": list})


def read_strict(path: str | os.PathLike, remedy: str) -> Record:
    """A job's JSON record as a job reads it: a value, or missing; one that is not JSON is a
    DamagedRecord saying `remedy`, one the OS cannot read its OSError."""
    read = read_record(path, object)
    if read.found is Found.UNREADABLE:
        raise read.error
    if read.found in (Found.NOT_TEXT, Found.NOT_JSON):
        raise DamagedRecord(f"{read.path} is not valid JSON ({read.error}); {remedy}")
    return read


def read_job_file(out: str | os.PathLike, file: JobFile, remedy: str) -> dict | None:
    """`file` in the job directory `out`: its record, None where it is not there yet; a damaged
    or foreign one is a DamagedRecord naming what is wrong and saying `remedy`."""
    read = read_strict(file.path(out), remedy)
    if not read.ok:
        return None
    problem = file.problem(read.value)
    if problem is not None:
        raise DamagedRecord(f"{read.path} is not a {file.what} ({problem}); {remedy}")
    return read.value


def write_job_file(out: str | os.PathLike, file: JobFile, value: dict) -> Path:
    """`value` as `file` in `out`, atomically (write.py); returns its path. A value its reader
    would refuse is a bug of the writer, raised before anything is written."""
    problem = file.problem(value)
    if problem is not None:
        raise ValueError(f"{file.name}: the value written {problem}")
    path = file.path(out)
    write_record(path, value)
    return path


def _types(kind) -> tuple:
    return kind if isinstance(kind, tuple) else (kind,)


def _json_type(value) -> str:
    """The JSON name of a value's type ("object", "array", ...)."""
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)
