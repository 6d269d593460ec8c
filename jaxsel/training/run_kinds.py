"""What a directory holds of jaxsel's: a `jaxsel train` run or a `jaxsel compare` comparison.

The two commands write different layouts into their `--out`: a run writes metrics.jsonl,
evals.json, final.json and config.json at the top; a comparison writes results.json at the
top and one run per row and seed below it (ROW/seedS/metrics.jsonl). Each command refuses
a directory that holds the other kind: a run written into a comparison hid the comparison
from `jaxsel report` (which reads the top-level run first), and a comparison written into
a run's directory mixed the two. Whether a directory holding the same kind may be
continued is each command's own rule (`run.check_paths`, `compare.check_fresh`).

A long job (`jaxsel compare`, `jaxsel frontier`) records itself in its directory's
`JOB_FILE` and each finished cell, a run of its own in OUT/<row>/seed<S>/, in `CELL_FILE`
(analysis/job.py, analysis/cells.py). A `jaxsel train` into a cell would replace the
records the job's tables are made of, so `train` refuses any directory inside a job's
(`refuse_job_cell`), as it refuses the job's directory itself; only the job trains its
cells.
"""
from __future__ import annotations

import os
from pathlib import Path

from .config import ConfigError
from .rundir import CELL_FILE, CONFIG_FILE, EVALS_FILE, FINAL_FILE, JOB_FILE, METRICS_FILE, RESULTS_FILE, \
    RUN_FILES, STRATEGY_FILE, run_metrics_below

__all__ = ["CELL_FILE", "CONFIG_FILE", "EVALS_FILE", "FINAL_FILE", "JOB_FILE", "METRICS_FILE", "RUN_FILES",
           "STRATEGY_FILE", "run_files", "comparison_files", "refuse_comparison", "refuse_run", "refuse_job_cell"]


def run_files(folder: str | os.PathLike) -> list[str]:
    """The files of a `jaxsel train` run in `folder`."""
    return [name for name in RUN_FILES if (Path(folder) / name).is_file()]


def comparison_files(folder: str | os.PathLike) -> list[str]:
    """The files of a `jaxsel compare` comparison in `folder` (relative paths): its
    results.json and its runs, ROW/seedS/ (and ROW/, as comparisons wrote them before seeds)."""
    out = Path(folder)
    found = [out / RESULTS_FILE, *run_metrics_below(out)]
    return [str(p.relative_to(out)) for p in found if p.is_file()]


def _listed(found: list[str]) -> str:
    return found[0] + (f" and {len(found) - 1} more" if len(found) > 1 else "")


def refuse_comparison(folder: str | os.PathLike, option: str = "--out") -> None:
    """ConfigError if `folder`, a `jaxsel train` run directory, holds a comparison."""
    found = comparison_files(folder)
    if found:
        raise ConfigError(f"run directory {str(folder)!r} holds a comparison ({_listed(found)}); `jaxsel train` "
                          f"never writes into one: choose another {option}")


def refuse_run(folder: str | os.PathLike, option: str = "--out") -> None:
    """ConfigError if `folder`, a `jaxsel compare` directory, holds a `jaxsel train` run."""
    found = run_files(folder)
    if found:
        raise ConfigError(f"compare directory {str(folder)!r} holds a `jaxsel train` run ({_listed(found)}); "
                          f"`jaxsel compare` never writes into one: choose another {option}")


def enclosing_job(folder: str | os.PathLike) -> Path | None:
    """The directory of the long job `folder` lies inside (one of its parents holds
    `JOB_FILE`), or None."""
    for parent in Path(folder).absolute().parents:
        if (parent / JOB_FILE).is_file():
            return parent
    return None


def refuse_job_cell(folder: str | os.PathLike, option: str = "--out") -> None:
    """ConfigError if `folder`, a `jaxsel train` run directory, lies inside a comparison's
    or a frontier's directory: a cell of the job (or a place the job may write one)."""
    job = enclosing_job(folder)
    if job is not None:
        cell = " (a finished cell: " + CELL_FILE + ")" if (Path(folder) / CELL_FILE).is_file() else ""
        raise ConfigError(f"run directory {str(folder)!r} lies inside the job in {str(job)!r} ({JOB_FILE}){cell}; "
                          f"`jaxsel train` never writes into a job's cells: finish the job with its own "
                          f"command and --resume, or choose another {option}")
