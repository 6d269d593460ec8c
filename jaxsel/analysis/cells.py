"""A long job's cells: one run each (a variant at a seed), recorded so that a stopped job
resumes without running a finished cell again, and its tables and pictures can be made
again from the records alone.

A cell lives in OUT/<row>/seed<S>/, beside its run's own files (metrics.jsonl, evals.json,
final.json, config.json, strategy.json). When the run has finished, `cell.json` is written
last and atomically: the code that ran it (`job.code_identity`), its settings (the run's
TrainConfig less where and how it was shown, `job.settings_of`), and a SHA-256 of its final
state, which says bit for bit whether two runs ended alike. A cell directory without
cell.json was stopped mid-run: the job clears it and runs it again. A cell.json whose
code or settings differ from the job's is refused, never mixed into one table.

Every cell's figures are read back from its files, the one just trained too, so a table
made in one go and one made after a resume (or by `jaxsel report`) come from the same
values. A cell that stops on a non-finite loss is recorded as failed (with the step) where
the job tolerates it (`jaxsel frontier`: one diverging configuration must not end a sweep
of dozens); `jaxsel compare` stops, as a lone run does.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import time
from pathlib import Path

import numpy as np

from ..training.config import ConfigError, TrainConfig
from ..training.faults import TrainingInterrupted
from ..training.runlog import write_json
from ..training.train import RunResult, train
from .job import code_identity, describe_code, first_difference, same_code, settings_of
from .progress import Progress

CELL_FILE = "cell.json"


@dataclasses.dataclass(frozen=True)
class FailedCell:
    """A cell whose run stopped on a non-finite loss or gradient (recorded, not retried)."""

    config: TrainConfig
    error: str
    step: int | None


class JobInterrupted(TrainingInterrupted):
    """A job stopped on a signal in one of its cells: the cell in flight is dropped (it runs
    again from its first step), the finished ones are kept for --resume."""

    def __init__(self, stop: TrainingInterrupted, message: str):
        super().__init__(stop.signum, stop.step, None)
        self.args = (message,)


def state_digest(state) -> str:
    """SHA-256 over every leaf's dtype, shape and bytes, in tree order (PRNG keys by their data)."""
    import jax
    import jax.numpy as jnp

    h = hashlib.sha256()
    for x in jax.tree.leaves(state):
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        x = np.asarray(jax.device_get(x))
        h.update(f"{x.dtype}{x.shape}".encode())
        h.update(np.ascontiguousarray(x).tobytes())
    return h.hexdigest()


def read_cell(directory: Path) -> dict | None:
    """A cell's record, or None when its run has not finished."""
    path = directory / CELL_FILE
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path} is not valid JSON ({err}); remove that cell's directory and resume") from None
    if not isinstance(record, dict) or "settings" not in record or "code" not in record:
        raise ConfigError(f"{path} is not a cell record; remove that cell's directory and resume")
    return record


def load_run(cfg: TrainConfig, directory: Path) -> RunResult:
    """The finished run of `cfg` as its files hold it (figures as written: non-finite -> None)."""
    def read(name: str):
        return json.loads((directory / name).read_text())

    records = [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines() if line.strip()]
    strategy = read("strategy.json")
    return RunResult(cfg, records, read("evals.json"), read("final.json"), None, cfg.strategy,
                     dict(strategy.get("timing", {})))


class Cells:
    """The cells of one job in `out`: each run once, or loaded from its record. `progress`
    tells the user where the job is; `keep_states` keeps the final TrainState of the cells
    trained in this process; `tolerate_faults` records a non-finite stop as a FailedCell.
    `load_only` (a report): every cell must be there, of `code` (the job's own: a report
    reads records, whatever code reads them, but never mixes records of two codes)."""

    def __init__(self, out: Path, progress: Progress, *, keep_states: bool = False, tolerate_faults: bool = False,
                 load_only: bool = False, code: dict | None = None):
        self.out, self.progress, self.code = out, progress, code or code_identity()
        self.keep_states, self.tolerate_faults, self.load_only = keep_states, tolerate_faults, load_only

    def get(self, cfg: TrainConfig, what: str) -> RunResult | FailedCell:
        """Cell `cfg` (its out_dir is the cell's directory): loaded when its record is there
        and agrees, else trained (a stopped run's leftovers cleared first)."""
        directory = Path(cfg.out_dir)
        record = read_cell(directory)
        if record is not None:
            self.check(record, cfg, directory)
            self.progress.loaded(what, directory.relative_to(self.out).as_posix())
            return self.load(record, cfg, directory)
        if self.load_only:
            raise ConfigError(f"cell {directory.relative_to(self.out).as_posix()} of {str(self.out)!r} has not "
                              f"finished; finish the job with --resume first")
        if directory.exists():   # stopped mid-run: its rows would mix with the new run's
            shutil.rmtree(directory)
        self.progress.started(what)
        started = time.perf_counter()
        try:
            run = train(cfg, checked=True)
        except TrainingInterrupted as stop:
            raise self.interrupted(stop, cfg, what) from None
        except Exception as err:
            if not (self.tolerate_faults and _is_fault(err)):
                raise
            self.progress.finished(time.perf_counter() - started)
            return self.record_failure(cfg, directory, err)
        write_json(directory / CELL_FILE, self.record(cfg, run, time.perf_counter() - started))
        self.progress.finished(time.perf_counter() - started)
        loaded = load_run(cfg, directory)
        return dataclasses.replace(loaded, state=run.state) if self.keep_states else loaded

    def interrupted(self, stop: TrainingInterrupted, cfg: TrainConfig, what: str) -> JobInterrupted:
        """What a signal in cell `what` did to the job, and how to continue it."""
        import signal

        done = self.progress.done
        return JobInterrupted(stop, f"received {signal.Signals(stop.signum).name}: stopped in cell {done + 1} of "
                                    f"{self.progress.total} ({what}) at step {stop.step} of {cfg.steps}, which runs "
                                    f"again from its start on resume; the {done} finished cell{'s' * (done != 1)} "
                                    f"{'are' if done != 1 else 'is'} kept in {self.out}: run the same command with "
                                    f"--out {self.out} --resume to continue")

    def record(self, cfg: TrainConfig, run: RunResult, seconds: float) -> dict:
        return {"settings": settings_of(cfg), "code": self.code, "seed": cfg.seed, "strategy": cfg.strategy,
                "options": cfg.strategy_options, "state_sha256": state_digest(run.state), "seconds": seconds,
                "failed": None}

    def record_failure(self, cfg: TrainConfig, directory: Path, err: Exception) -> FailedCell:
        step = getattr(err, "step", None)
        directory.mkdir(parents=True, exist_ok=True)
        write_json(directory / CELL_FILE, {"settings": settings_of(cfg), "code": self.code, "seed": cfg.seed,
                                           "strategy": cfg.strategy, "options": cfg.strategy_options,
                                           "state_sha256": None, "failed": str(err), "failed_step": step})
        return FailedCell(cfg, str(err), step)

    def load(self, record: dict, cfg: TrainConfig, directory: Path) -> RunResult | FailedCell:
        if record.get("failed"):
            return FailedCell(cfg, record["failed"], record.get("failed_step"))
        return load_run(cfg, directory)

    def check(self, record: dict, cfg: TrainConfig, directory: Path) -> None:
        """Refuse a cell computed by other code or with other settings than this job's."""
        where = directory / CELL_FILE
        if not same_code(record["code"], self.code):
            raise ConfigError(f"{where} was computed by other jaxsel code ({describe_code(record['code'])}) than "
                              f"this one ({describe_code(self.code)}); its figures would not be comparable: finish "
                              f"the job with that code, or start afresh in another --out")
        diff = first_difference(record["settings"], settings_of(cfg))
        if diff is not None:
            raise ConfigError(f"{where} was computed with {diff}; cells of other settings are not mixed: resume "
                              f"with the job's settings, or start afresh in another --out")


def _is_fault(err: Exception) -> bool:
    from ..training.faults import NonFiniteError

    return isinstance(err, NonFiniteError)
