"""The run directory's names: the one place that spells the files jaxsel writes into a run's
`--out`, a comparison's or frontier's directory and a checkpoint folder.

Why: these names were spelled as string literals in nine modules across two packages, so a
rename (or a new record) had to find every spelling, and a reader could drift from its
writer. Every other module takes the names from here: as constants, or as paths on a
`RunDir(path)`. This module imports nothing of jaxsel's (and no JAX), so the CLI, the
analysis layer and the training layer can all read it.

A `jaxsel train` run writes metrics.jsonl, evals.json, final.json and config.json at the
top of its directory, with strategy.json (its strategy as built and its cost-model
keywords) and environment.json (what it ran on) beside them; a comparison writes
results.json at the top and one run per row and seed below it (ROW/seedS/); a long job
records itself in job.json (its compiled programs in .xla-cache) and each finished cell
in its run's cell.json; a frontier, a calibration and a report write their own files beside
them (frontier.json, task.json, derived_points.json, calibration.json, report.json, read
and written through job_files.py). While a run
trains it holds `.jaxsel.lock` in its run and checkpoint directories (lock.py); a
checkpoint folder records the run directory that owns it in `.jaxsel-owner.json`
(owner.py).
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

#: a run's per-step records, one JSON object a line (metrics_file.MetricsFile)
METRICS_FILE = "metrics.jsonl"
#: a run's evaluations, a JSON list
EVALS_FILE = "evals.json"
#: a run's closing figures, a JSON object
FINAL_FILE = "final.json"
#: a run's settings as it ran them (recorded.py reads them back for a resume)
CONFIG_FILE = "config.json"
#: a run's strategy as built and its cost-model keywords
STRATEGY_FILE = "strategy.json"
#: what a run ran on (environment.py)
ENVIRONMENT_FILE = "environment.json"
#: a comparison's rows, at the top of its directory (analysis/compare.py)
RESULTS_FILE = "results.json"
#: a long job's record, at the top of its directory (analysis/job.py)
JOB_FILE = "job.json"
#: a finished cell's record, in the cell's run directory (analysis/cells.py)
CELL_FILE = "cell.json"
#: a frontier's result, its table and its picture, at the top of its directory (analysis/frontier_report.py)
FRONTIER_FILE = "frontier.json"
FRONTIER_TABLE = "frontier.md"
FRONTIER_PICTURE = "frontier.png"
#: a frontier's task as `jaxsel compare --config` reads it (analysis/frontier.py)
TASK_FILE = "task.json"
#: the deltas of a frontier's fires:F points, derived from plain BSP's runs (analysis/frontier_points.py)
DERIVED_FILE = "derived_points.json"
#: a calibration's figures and their picture (analysis/calibrate.py)
CALIBRATION_FILE = "calibration.json"
CALIBRATION_PICTURE = "calibration.png"
#: `jaxsel report`'s projections and their picture, beside the runs it reports (analysis/report.py)
REPORT_FILE = "report.json"
REPORT_PICTURE = "report.png"
#: the id of a run's W&B run, kept so that a resume continues it (writers.WandbWriter)
WANDB_ID_FILE = "wandb_run_id"
#: the OS-locked file a training run holds in its run and checkpoint directories (lock.py)
LOCK_NAME = ".jaxsel.lock"
#: in a checkpoint folder: {"run_dir": the resolved run directory that owns it} (owner.py)
OWNER_FILE = ".jaxsel-owner.json"
#: a long job's compiled programs (JAX's persistent cache), kept until the job has finished (analysis/job.py)
CACHE_DIR = ".xla-cache"
#: in a job's CACHE_DIR: an HMAC of each entry's name and bytes, under this user's key (analysis/job.py)
CACHE_SEAL = ".jaxsel-seal"
#: where checkpoints go, relative to the working directory, unless --checkpoint-dir says
CHECKPOINTS_DIR = "checkpoints"

#: what a `jaxsel train` run writes at the top of its directory (config.json alone: a run
#: stopped before its first step)
RUN_FILES = (METRICS_FILE, EVALS_FILE, FINAL_FILE, CONFIG_FILE)
#: what makes a run directory hold a run (config.json alone is a run stopped before its first step)
RUN_RECORDS = (METRICS_FILE, EVALS_FILE, FINAL_FILE)


@dataclasses.dataclass(frozen=True)
class RunDir:
    """One run directory: the paths of its records (nothing is read or created here)."""
    path: Path

    def __init__(self, path: str | os.PathLike):
        object.__setattr__(self, "path", Path(path))

    @property
    def metrics(self) -> Path:
        return self.path / METRICS_FILE

    @property
    def evals(self) -> Path:
        return self.path / EVALS_FILE

    @property
    def final(self) -> Path:
        return self.path / FINAL_FILE

    @property
    def config(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def strategy(self) -> Path:
        return self.path / STRATEGY_FILE

    @property
    def environment(self) -> Path:
        return self.path / ENVIRONMENT_FILE

    @property
    def results(self) -> Path:
        return self.path / RESULTS_FILE

    @property
    def job(self) -> Path:
        return self.path / JOB_FILE

    @property
    def cell(self) -> Path:
        return self.path / CELL_FILE

    @property
    def lock(self) -> Path:
        return self.path / LOCK_NAME

    @property
    def owner(self) -> Path:
        return self.path / OWNER_FILE


def run_metrics_below(folder: str | os.PathLike) -> list[Path]:
    """The metrics files of the runs one or two levels below `folder`: a comparison's or a
    long job's ROW/seedS/ (first), then ROW/ as comparisons wrote them before seeds."""
    out = Path(folder)
    return [*sorted(out.glob(f"*/seed*/{METRICS_FILE}")), *sorted(out.glob(f"*/{METRICS_FILE}"))]
