"""A long job's cells: one run each (a variant at a seed), recorded so that a stopped job
resumes without running a finished cell again, and its tables and pictures can be made
again from the records alone.

A cell lives in OUT/<row>/seed<S>/, beside its run's own files (metrics.jsonl, evals.json,
final.json, config.json, strategy.json). When the run has finished, `cell.json` is written
last and atomically: the code that ran it (`job.code_identity`), its settings (the run's
TrainConfig less where and how it was shown, `job.settings_of`), a SHA-256 of its final
state, which says bit for bit whether two runs ended alike, and a SHA-256 of each of the
run's files, which the job's tables are made of. A cell directory without cell.json was
stopped mid-run: the job clears it and runs it again. A cell.json whose code or settings
differ from the job's is refused, never mixed into one table, and so is a cell whose files
are not the ones its run wrote (edited, replaced by another run, cut short or missing).

All cells of a job compute their packed replicas one way: the loop the first cell ran
(`packing="auto"` chooses it there, by measuring where it measures) is the loop of
every later cell, in this process or after a resume, whatever the measurement setting or
the packing cache says by then; a finished cell that ran another loop is refused.

Every cell's figures are read back from its files, the one just trained too, so a table
made in one go and one made after a resume (or by `jaxsel report`) come from the same
values. A cell that stops on a non-finite loss is recorded as failed (with the step) where
the job tolerates it (`jaxsel frontier`: one diverging configuration must not end a sweep
of dozens); `jaxsel compare` stops, as a lone run does.
"""
from __future__ import annotations

import dataclasses
import hashlib
import shutil
import time
from pathlib import Path

import numpy as np

from ..training.config import ConfigError, TrainConfig
from ..training.faults import TrainingInterrupted
from ..training.old_records import renamed_keys
from ..training.rundir import CELL_FILE, EVALS_FILE, FINAL_FILE, METRICS_FILE, RUN_FILES, STRATEGY_FILE, \
    RunDir
from ..training.plan import plan_run
from ..training.rundir.lock import DirectoryLock
from ..training.rundir.job_files import read_strict
from ..training.rundir.records import Found, MetricLines, Record, read_record, read_run
from ..training.rundir.write import write_record
from ..training.cell_batch import NotOneProgram, share_program, train_cells, why_alone
from ..training.train import RunResult, train
from .job import code_identity, describe_code, first_difference, same_code, settings_of
from .progress import Progress

#: the run's files a cell's figures are read from, each digested in cell.json
FIGURE_FILES = (*RUN_FILES, STRATEGY_FILE)


@dataclasses.dataclass(frozen=True)
class FailedCell:
    """A cell whose run stopped on a non-finite loss or gradient (recorded, not retried)."""

    config: TrainConfig
    error: str
    step: int | None

    @property
    def seed(self) -> int:
        """The seed it ran (its readers hold the cell, not its whole record: issue 59)."""
        return self.config.optim.seed


@dataclasses.dataclass(frozen=True)
class PendingCell:
    """A cell of another shard (`shard.py`) that was not in when this shard came to it:
    `ordinal` is its number in the job's order, `what` its progress name; or one of a batch
    this process trains on its queue's threads (`training`: the batch's future and the
    cell's place in it, batch_queue.py)."""

    config: TrainConfig
    ordinal: int
    what: str
    training: tuple | None = None


class JobInterrupted(TrainingInterrupted):
    """A job stopped on a signal in one of its cells: the cell in flight is dropped (it runs
    again from its first step), the finished ones are kept for --resume."""

    def __init__(self, stop: TrainingInterrupted, what: str, out: Path):
        super().__init__(stop.signum, stop.step, None)
        self.what = what   # the command line follows it with the command that continues
        self.args = (f"{what}: run the same command with --out {out} --resume to continue",)


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
    read = read_strict(path, "remove that cell's directory and resume")
    if not read.ok:
        return None
    record = read.value
    fields = ("settings", "code", "files")
    if not (isinstance(record, dict) and "settings" in record and "code" in record
            and all(isinstance(record.get(k, {}), dict) for k in fields)):
        raise ConfigError(f"{path} is not a cell record; remove that cell's directory and resume")
    return record


class DamagedCell(ValueError):
    """A cell's file is missing or not what its run writes (the message names the file)."""


def file_digests(directory: Path) -> dict[str, str]:
    """SHA-256 of each of the cell's `FIGURE_FILES` that is there."""
    return {name: hashlib.sha256((directory / name).read_bytes()).hexdigest()
            for name in FIGURE_FILES if (directory / name).is_file()}


def _strict(record: Record):
    """A record's value as its run wrote it; a missing or damaged file is a DamagedCell."""
    if record.found is Found.MISSING:
        raise DamagedCell(f"its {record.path.name} is missing")
    if record.found in (Found.NOT_TEXT, Found.NOT_JSON):
        raise DamagedCell(f"its {record.path.name} is not valid JSON ({record.error})")
    if record.found is Found.UNREADABLE:
        raise DamagedCell(f"its {record.path.name} cannot be read ({record.error})")
    if record.found is Found.WRONG_KIND:
        raise DamagedCell(f"its {record.path.name} holds a JSON {record.found_kind}, not the {record.kind.__name__} "
                          f"a run writes there")
    return record.value


def _strict_rows(lines: MetricLines) -> list:
    """metrics.jsonl's rows, every line whole; a missing file or a cut line is a DamagedCell."""
    if lines.found is Found.MISSING:
        raise DamagedCell(f"its {lines.path.name} is missing")
    if lines.found is Found.NOT_TEXT:
        raise DamagedCell(f"its {lines.path.name} is not UTF-8 text ({lines.error.reason})")
    if lines.found is Found.UNREADABLE:
        raise DamagedCell(f"its {lines.path.name} cannot be read ({lines.error})")
    if lines.cut:
        raise DamagedCell(f"its {lines.path.name} has a line that is not JSON ({lines.cut[0][1]})")
    return [row for _, row in lines.rows]


#: what the job's tables read of a cell's final.json: (field, what it must be)
FINAL_FIELDS = {"final_test_accuracy": (int, float), "bytes_allreduced": (int, float), "sync_fraction": (int, float),
                "wall_time_s": (int, float), "steps": int, "strategy": str}


def _entries(values: list, name: str, fields: dict) -> list[dict]:
    for i, entry in enumerate(values, 1):
        wrong = None if isinstance(entry, dict) else "not a JSON object"
        for key, kind in fields.items() if wrong is None else ():
            if isinstance(entry.get(key), bool) or not isinstance(entry.get(key), kind):
                wrong = f"its {key} is {entry.get(key)!r}"
                break
        if wrong is not None:
            raise DamagedCell(f"its {name} entry {i} is not what a run writes ({wrong})")
    return values


def cell_result(cfg: TrainConfig, directory: Path) -> RunResult:
    """The finished cell of `cfg` as the RunResult its training returned, read from its run
    directory (figures as written: non-finite -> None); a missing or malformed file is a
    DamagedCell naming it. Read by the run directory's one reader (`rundir.records.read_run`,
    as `report.load_run` reads a run) and strict, unlike the report (which skips a line cut
    off by an interruption): a job's table is made of these records, so a damaged one is
    retrained, never half-read."""
    run = read_run(directory)
    records = _strict_rows(run.metrics)
    _entries(records, METRICS_FILE, {"step": int})
    if not records:
        raise DamagedCell(f"its {METRICS_FILE} holds no step")
    evals = _entries(_strict(run.evals), EVALS_FILE, {"step": int})
    final = _strict(run.final)
    _entries([final], FINAL_FILE, FINAL_FIELDS)
    timing = _strict(run.strategy).get("timing", {})
    return RunResult(cfg, records, evals, final, None, cfg.method.strategy,
                     dict(timing) if isinstance(timing, dict) else {})


class Cells:
    """The cells of one job in `out`: each run once, or loaded from its record. `progress`
    tells the user where the job is; `keep_states` keeps the final TrainState of the cells
    trained in this process; `tolerate_faults` records a non-finite stop as a FailedCell.
    `load_only` (a report): every cell must be there, of `code` (the job's own: a report
    reads records, whatever code reads them, but never mixes records of two codes)."""

    def __init__(self, out: Path, progress: Progress, *, keep_states: bool = False, tolerate_faults: bool = False,
                 load_only: bool = False, code: dict | None = None, shard=None, late_warnings: bool = True,
                 batch_cells: bool = True, queue=None):
        self.out, self.progress, self.code = out, progress, code or code_identity()
        self.shard, self.ordinal = shard, 0   # this process's Shard (None: every cell), the next cell's number
        progress.shard = shard
        self.keep_states, self.tolerate_faults, self.load_only = keep_states, tolerate_faults, load_only
        self.batch_cells = batch_cells   # `get_all` trains cells that share a program as one batch
        self.packing: tuple[str, str] | None = None   # (the job's packing loop, the cell that ran it first)
        self.late_warnings = late_warnings   # False: the job's table notes a cell that never synced after warm-up
        self.queue = queue   # a BatchQueue (batch_queue.py): `get_all`'s batches train on its threads
        self.batches: list = []   # the futures of the batches handed to it

    def name(self, directory: Path) -> str:
        return directory.relative_to(self.out).as_posix()

    def get(self, cfg: TrainConfig, what: str) -> RunResult | FailedCell | PendingCell:
        """Cell `cfg` (its out_dir is the cell's directory): loaded when its record is there
        and agrees, else trained (a stopped run's leftovers cleared first); a cell of
        another shard that is not in yet is a PendingCell (`need` waits for it)."""
        found = self.ready(cfg, what)
        return found if found is not None else self.train_alone(cfg, what)

    def get_all(self, wanted: list[tuple[TrainConfig, str]], row: str | list[str] | None = None
                ) -> list[RunResult | FailedCell | PendingCell]:
        """`get` for each (cfg, what) of `wanted` (the seeds of `row`, as progress names the
        row: a batch's line is "ROW, seeds 0, 1, 2"; a list: each cell's row), in order; the cells this
        process trains that share a program train as one batch (training/cell_batch.py)
        unless the job runs them one by one (`batch_cells` False); a lone seed too (beside
        a copy of itself), so a cell ends with the same bits however many of its row are
        trained with it: a comparison of one seed, a resumed job, a shard's share."""
        rows = [row] * len(wanted) if isinstance(row, str) else row   # each cell's row, or None
        found = [self.ready(cfg, what) for cfg, what in wanted]
        todo = [i for i, f in enumerate(found) if f is None]
        if not self.batch_cells or not todo:
            return [f if f is not None else self.train_alone(*wanted[i]) for i, f in enumerate(found)]
        plans = [self.plan(wanted[i][0]) for i in todo]
        for group in share_program(plans):
            cells = [(todo[g], plans[g]) for g in group]
            if why_alone(cells[0][1].cfg) is not None:
                found[cells[0][0]] = self.train_alone(*wanted[cells[0][0]])
                continue
            named = None if rows is None else list(dict.fromkeys(rows[i] for i, _ in cells))
            batch = ([wanted[i] for i, _ in cells], [p for _, p in cells], named)
            if self.queue is None or not self.loop_chosen(batch[1][0].cfg):
                results = self.train_batch(*batch)
            else:   # trained on the queue's threads while this one plans on; waited for where needed
                future = self.queue.submit(lambda batch=batch: self.train_batch(*batch))
                self.batches.append(future)
                results = [PendingCell(wanted[i][0], -1, wanted[i][1], (future, k)) for k, (i, _) in enumerate(cells)]
            for (i, _), result in zip(cells, results):
                found[i] = result
        return found

    def ready(self, cfg: TrainConfig, what: str) -> RunResult | FailedCell | PendingCell | None:
        """Cell `cfg` loaded (or pending: another shard's), or None when this process must
        train it, its stopped run's leftovers cleared."""
        directory, ordinal = Path(cfg.evaluation.out_dir), self.ordinal
        self.ordinal += 1
        if self.shard is not None and not self.shard.owns(ordinal):   # another shard's: loaded when in
            return self.finished(cfg, what, quiet=True) or PendingCell(cfg, ordinal, what)
        found = self.finished(cfg, what)
        if found is not None:
            return found
        if self.load_only:
            raise ConfigError(f"cell {self.name(directory)} of {str(self.out)!r} has not "
                              f"finished; finish the job with --resume first")
        if directory.exists():   # stopped mid-run: its rows would mix with the new run's
            DirectoryLock(directory, "cell directory").check_free()   # unless a live process trains it
            shutil.rmtree(directory)
        return None

    def plan(self, cfg: TrainConfig):
        """The cell's one plan: the job's packing loop, and its after-run warning where the
        job does not note it in its table."""
        plan = plan_run(self.pinned(cfg), job_cell=True)
        return plan if self.late_warnings else dataclasses.replace(plan, late_warning=False)

    def train_alone(self, cfg: TrainConfig, what: str) -> RunResult | FailedCell:
        """Train cell `cfg` by itself (its directory cleared by `ready`) and record it."""
        directory = Path(cfg.evaluation.out_dir)
        number = self.progress.started(what)
        started = time.perf_counter()
        try:
            run = train(self.plan(cfg))
        except TrainingInterrupted as stop:
            raise self.interrupted(stop, cfg, [what], number) from None
        except Exception as err:
            if not (self.tolerate_faults and _is_fault(err)):
                raise
            self.progress.finished(time.perf_counter() - started)
            return self.record_failure(cfg, directory, err)
        return self.recorded(cfg, run, time.perf_counter() - started)

    def train_batch(self, wanted: list[tuple[TrainConfig, str]], plans: list,
                    rows: list[str] | None = None) -> list[RunResult | FailedCell]:
        """Train cells that share a program as one batch (`cell_batch.train_cells`), each
        recorded as if it had run alone (`rows`: the rows they belong to, as progress names
        them); the batch's time is shared out among its cells."""
        started, numbered = time.perf_counter(), []   # the number progress gave its first cell
        try:
            runs = train_cells(plans, tolerate_faults=self.tolerate_faults,
                               on_start=lambda: numbered.append(self.progress.started_together(
                                   [what for _, what in wanted], rows, [cfg.optim.seed for cfg, _ in wanted])),
                               signals=self.queue.signals if self.queue is not None else None,
                               stepping=self.queue.stepping if self.queue is not None else None)
        except NotOneProgram:   # a strategy that draws from the run's seed: one by one
            return [self.train_alone(cfg, what) for cfg, what in wanted]
        except TrainingInterrupted as stop:
            raise self.interrupted(stop, wanted[0][0], [what for _, what in wanted],
                                   numbered[0] if numbered else None) from None
        share = (time.perf_counter() - started) / len(wanted)
        out = []
        for (cfg, _), run in zip(wanted, runs):
            if isinstance(run, Exception):
                self.progress.finished(share)
                out.append(self.record_failure(cfg, Path(cfg.evaluation.out_dir), run))
            else:
                out.append(self.recorded(cfg, run, share, batched=len(wanted)))
        return out

    def recorded(self, cfg: TrainConfig, run: RunResult, seconds: float, batched: int = 1) -> RunResult:
        """A cell just trained, sealed with cell.json and read back from its files."""
        directory = Path(cfg.evaluation.out_dir)
        write_record(directory / CELL_FILE, self.record(cfg, run, seconds, batched))
        self.progress.finished(seconds)
        self.check_packing(directory)
        loaded = cell_result(cfg, directory)
        return dataclasses.replace(loaded, state=run.state) if self.keep_states else loaded

    def finished(self, cfg: TrainConfig, what: str, quiet: bool = False) -> RunResult | FailedCell | None:
        """Cell `cfg` loaded from its record when it has one that agrees (None: not finished)."""
        directory = Path(cfg.evaluation.out_dir)
        try:
            record = read_cell(directory)
            if record is None:
                return None
            self.check(record, cfg, directory)
            if not quiet:
                self.progress.loaded(what, self.name(directory))
            return self.load(record, cfg, directory)
        except DamagedCell as err:
            raise ConfigError(f"cell {self.name(directory)} of {str(self.out)!r}: {err}; restore it, or remove "
                              f"the cell's directory and resume the job to run it again") from None

    def settle(self, runs: list) -> tuple[list, list[PendingCell]]:
        """`runs` with each PendingCell loaded where its shard has finished it since (one
        this process trains: once its batch has, waiting for it; its error raised here), and
        the ones still missing. Before it looks for another shard's cells, every batch this
        process handed its queue is finished and recorded: a shard that ends looks for the
        others' cells after writing its own, so of two ending at once the later one finds
        every cell in and writes the job's tables."""
        out = [self._trained(r) if isinstance(r, PendingCell) and r.training is not None else r for r in runs]
        if any(isinstance(r, PendingCell) for r in out):
            for batch in self.batches:
                batch.result()
            out = [self.finished(r.config, r.what, quiet=True) or r if isinstance(r, PendingCell) else r for r in out]
        return out, [r for r in out if isinstance(r, PendingCell)]

    @staticmethod
    def _trained(cell: PendingCell):
        future, place = cell.training
        return future.result()[place]

    def need(self, runs: list) -> list:
        """`runs` with every PendingCell loaded, waiting for each while its shard runs or has
        not started (the results plan the cells after them); a shard that stopped without
        it is a ConfigError saying how to finish."""
        from .shard import POLL_S, shard_state

        runs, missing = self.settle(runs)
        said = False
        while missing:
            owner = self.shard.owner(missing[0].ordinal)
            state = shard_state(self.out, owner, self.shard.count)
            if state == "stopped":
                cell = self.name(Path(missing[0].config.evaluation.out_dir))
                raise ConfigError(f"shard {self.shard.name} needs cell {cell} "
                                  f"of shard {owner}/{self.shard.count} to plan the cells after it, and that shard "
                                  f"stopped without it: run shard {owner}/{self.shard.count} again, then this one")
            if not said:
                self.progress.say(f"waiting for shard {owner}/{self.shard.count} ({state}) to finish "
                                  f"{missing[0].what}: the cells after it are planned from it")
                said = True
            time.sleep(POLL_S)
            runs, missing = self.settle(runs)
        return runs

    def pinned(self, cfg: TrainConfig) -> TrainConfig:
        """`cfg` running the job's packing loop (`packing="auto"` chooses it in the
        job's first cell only: see the module docstring)."""
        if self.packing is None or cfg.placement.packing != "auto" or self.packing[0] == "single":
            return cfg
        return dataclasses.replace(cfg, packing=self.packing[0])

    def loop_chosen(self, cfg: TrainConfig) -> bool:
        """Whether the packing loop of `cfg`'s cell is known before it trains: given, or
        chosen by the job's first cell (`pinned`). The batch whose cell chooses it (by
        measuring, where "auto" measures) trains on the job's own thread, so that no batch
        measures beside it and chooses another."""
        return cfg.placement.packing != "auto" or self.packing is not None

    def check_packing(self, directory: Path) -> None:
        """The loop the cell in `directory` ran (its config.json) is the job's: the first
        cell's sets it, a later one that ran another is refused."""
        ran = ran_loop(directory)
        if ran is None:   # a cell that stopped before its run wrote config.json
            return
        if self.packing is None:
            self.packing = (ran, self.name(directory))
        elif ran != self.packing[0]:
            loop, first = self.packing
            raise ConfigError(f"cell {self.name(directory)} of {str(self.out)!r} computed its packed replicas by "
                              f"{ran}, cell {first} by {loop}: one job's cells run one packing loop; remove "
                              f"{self.name(directory)} (and the cells after it that ran {ran}) and resume the "
                              f"job: they run {loop}")

    def interrupted(self, stop: TrainingInterrupted, cfg: TrainConfig, whats: list[str],
                    first: int | None = None) -> JobInterrupted:
        """What a signal in cells `whats` (one, or a batch's, progress's numbers from `first`)
        did to the job, and how to continue it."""
        import signal

        done, many = self.progress.done, len(whats) > 1
        first = first if first is not None else done + 1   # (stopped before it started)
        where = (f"cells {first}-{first + len(whats) - 1} of {self.progress.total}, trained as one batch "
                 f"({'; '.join(whats)}), at step {stop.step} of {cfg.optim.steps}, which run" if many else
                 f"cell {first} of {self.progress.total} ({whats[0]}) at step {stop.step} of {cfg.optim.steps}, "
                 f"which runs")
        return JobInterrupted(stop, f"received {signal.Signals(stop.signum).name}: stopped in {where} again from "
                                    f"{'their' if many else 'its'} start on resume; the {done} finished "
                                    f"cell{'s' * (done != 1)} {'are' if done != 1 else 'is'} kept in {self.out}",
                              self.out)

    def record(self, cfg: TrainConfig, run: RunResult, seconds: float, batched: int = 1) -> dict:
        """cell.json of a trained cell; `batched`: the cells of its batch (1: trained alone),
        `seconds` then its share of the batch's time."""
        directory = Path(cfg.evaluation.out_dir)
        return {"settings": settings_of(cfg), "code": self.code, "seed": cfg.optim.seed,
                "strategy": cfg.method.strategy, "options": cfg.method.strategy_options,
                "state_sha256": state_digest(run.state), "seconds": seconds, "batched": batched,
                "files": file_digests(directory), "failed": None}

    def record_failure(self, cfg: TrainConfig, directory: Path, err: Exception) -> FailedCell:
        step = getattr(err, "step", None)
        directory.mkdir(parents=True, exist_ok=True)
        write_record(directory / CELL_FILE, {"settings": settings_of(cfg), "code": self.code, "seed": cfg.optim.seed,
                                           "strategy": cfg.method.strategy, "options": cfg.method.strategy_options,
                                           "state_sha256": None, "failed": str(err), "failed_step": step})
        self.check_packing(directory)
        return FailedCell(cfg, str(err), step)

    def load(self, record: dict, cfg: TrainConfig, directory: Path) -> RunResult | FailedCell:
        if record.get("failed"):
            return FailedCell(cfg, record["failed"], record.get("failed_step"))
        return cell_result(cfg, directory)

    def check(self, record: dict, cfg: TrainConfig, directory: Path) -> None:
        """Refuse a cell computed by other code or with other settings than this job's,
        whose files are not those its run wrote, or that ran another packing loop."""
        where = directory / CELL_FILE
        if not same_code(record["code"], self.code):
            raise ConfigError(f"{where} was computed by other jaxsel code ({describe_code(record['code'])}) than "
                              f"this one ({describe_code(self.code)}); its figures would not be comparable: finish "
                              f"the job with that code, or start afresh in another --out")
        diff = first_difference(record["settings"], settings_of(cfg))
        if diff is not None:
            raise ConfigError(f"{where} was computed with {diff}; cells of other settings are not mixed: resume "
                              f"with the job's settings, or start afresh in another --out")
        check_files(record, directory)
        self.check_packing(directory)


def check_files(record: dict, directory: Path) -> None:
    """DamagedCell unless each file `record` digests is there, as its run wrote it (cells
    recorded before files were digested are read as they are)."""
    found = file_digests(directory)
    for name, digest in record.get("files", {}).items():
        if name not in found:
            raise DamagedCell(f"its {name} is missing")
        if found[name] != digest:
            raise DamagedCell(f"its {name} is not the one its run wrote ({CELL_FILE} holds the SHA-256 of each of "
                              f"its files: edited, or written by another run since)")


def ran_loop(directory: Path) -> str | None:
    """How the run in `directory` computed its packed replicas, as its config.json records
    it: a loop, "single" (one replica per device), or None when it does not say."""
    config = read_record(RunDir(directory).config, dict)
    if not config.ok:
        return None
    packing = renamed_keys(config.value).get("packing_choice", "?")   # a record of before: old_records.py
    if packing is None:
        return "single"
    return packing.get("loop") if isinstance(packing, dict) and isinstance(packing.get("loop"), str) else None


def _is_fault(err: Exception) -> bool:
    from ..training.faults import NonFiniteError

    return isinstance(err, NonFiniteError)


def row_config(base: TrainConfig, variant, out_dir: str | None = None, seed: int | None = None) -> TrainConfig:
    """The settings of one cell: `variant` (a `variants.Variant`) run on the job's settings
    `base`, in `out_dir`, with `seed` (default: the base's). The one place a job's cells get
    their settings, so the modules that vary a run per cell never reach into the job's
    record themselves."""
    return dataclasses.replace(base, strategy=variant.name, strategy_options=effective_options(base, variant),
                               out_dir=out_dir, seed=base.optim.seed if seed is None else seed)


def effective_options(base: TrainConfig, variant) -> dict:
    """The strategy options a cell of `variant` takes: the job's global options (`base`'s)
    under the entry's own."""
    return variant.effective(base.method.strategy_options)
