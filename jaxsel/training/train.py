"""The training loop: asynchronous step dispatch over a built run (run.py) and a run log
(runlog.py); checkpoints and resume (checkpoint.py), NaN and signal handling (faults.py)
and multi-host runs (distributed.py).

Steps are dispatched without waiting for them, except that on CPU the loop stays at most
`CPU_MAX_INFLIGHT` steps ahead of the devices (core/pacing.py); metrics stay on the device
and are fetched every `log_every` steps (one host round-trip per window, never per step).
"""
from __future__ import annotations

import dataclasses
import signal
import sys
import time
import warnings
from pathlib import Path
from typing import Any, NamedTuple

import jax

from ..core import parallel
from ..core.pacing import pace
from ..core.correlation import replica_metrics
from . import distributed
from ..data.fingerprint import data_fingerprint
from .checkpoint import Checkpointer, CheckpointMismatch, run_identity
from .rundir.owner import new_run_id, run_id_of
from .config import TrainConfig, agreed_settings
from .environment import environment
from .faults import MAX_CONSECUTIVE_SKIPS, NonFiniteError, StopSignals, TrainingInterrupted, \
    describe_nonfinite, guard_nonfinite
from .lr_schedule import parse_lr_schedule
from .replica_eval import evaluate_replicas
from .plan import RunPlan, created_dirs, plan_run
from .run import Run, assemble_run, check_paths, claim_checkpoints, evaluation_weights
from .rundir import RunDir
from .rundir.lock import lock_run
from .rundir.write import write_record
from .runlog import LogSettings, RunLog
from .sync_horizon import no_sync_after_warmup_warning
from .writers import run_name

__all__ = ["RunPlan", "RunResult", "TrainConfig", "build_run", "plan_run", "train"]


@dataclasses.dataclass
class RunResult:
    config: TrainConfig
    records: list[dict]            # one per step
    evals: list[dict]              # {step, test_accuracy, test_loss}
    final: dict
    state: Any
    strategy_name: str
    timing: dict = dataclasses.field(default_factory=dict)   # the strategy's cost-model keywords

    # The facts a finished run's readers (analysis/) take from its settings, so that they
    # hold the run, not its whole record (issue 59: tests/test_settings_reads.py).
    @property
    def seed(self) -> int:
        return self.config.optim.seed

    @property
    def run_dir(self) -> str | None:
        """Where it wrote (None: nowhere)."""
        return self.config.evaluation.out_dir

    @property
    def replicas(self) -> int:
        return self.config.placement.replicas

    @property
    def method(self):
        """Its StrategySettings: the strategy and its options as configured."""
        return self.config.method

    @property
    def projection(self):
        """Its ProjectSettings: the cluster its cost model projects onto."""
        return self.config.projection

    @property
    def task_sections(self) -> tuple:
        """Its DataSettings, OptimSettings and ReplicaSettings: what it trained
        (analysis/task_setting.py's `TaskSetting.of`)."""
        return self.config.data, self.config.optim, self.config.placement


class Due(NamedTuple):
    """What the loop does after step t."""

    flush: bool   # read the metrics window (always before an evaluation or a save)
    eval: bool
    save: bool
    halt: bool    # a stop signal: save and leave


def train(plan: RunPlan | TrainConfig, run: Run | None = None, *, checked: bool | None = None) -> RunResult:
    """Train the run `plan` decides (plan.py; a TrainConfig is planned here: `plan_run`);
    returns per-step records, evaluations and final figures.

    With checkpointing on (see `TrainConfig.checkpoint_root`) the state is saved every
    `checkpoint_every` steps, at the end and on SIGTERM/SIGINT (then `TrainingInterrupted`
    is raised); `resume` continues from the newest verified checkpoint and the metrics
    log continues where it left off (a copied run directory forks its own checkpoints:
    rundir/owner.py). A non-finite loss or gradient raises
    `NonFiniteError` (or skips the step: `nonfinite="skip"`); see faults.py. The run
    owns its run and checkpoint directories while it trains (rundir/lock.py), and the
    processes of a multi-host run first agree on their settings.

    Every check comes before anything is created: the plan's, then the run's memory and
    disk estimates as it is built (`assemble_run`); then its directories are made
    (`created_dirs`), locked and checked again under the lock. `run` and `checked` are the
    last release's ways in (a built run, a config checked already): they still work, and
    warn; pass a plan instead. A cell of a long job is planned with `job_cell=True`
    (`plan_run`): the job's directory holds it, which no other run may write.
    """
    if run is not None or checked is not None:
        warnings.warn("train(cfg, run=..., checked=...) is deprecated and goes in the next release: train a plan, "
                      "train(plan_run(cfg)) (jaxsel.training.plan), whose loader a hook may patch",
                      DeprecationWarning, stacklevel=2)
        if run is not None and run.plan is not None:
            plan = run.plan
    plan = plan if isinstance(plan, RunPlan) else plan_run(plan)
    cfg = plan.cfg
    with StopSignals(checkpointing=plan.paths.checkpoint_root is not None) as signals:   # start-up stops too
        distributed.agree_settings(agreed_settings(cfg))   # before anything collective
        distributed.agree_checkpoint_folder(plan.paths.checkpoint_root)
        lead = jax.process_index() == 0
        built = assemble_run(plan)   # its last checks (memory, disk): nothing is created before them
        with created_dirs(plan, lead) as cfg:
            built = dataclasses.replace(built, cfg=cfg)
            with lock_run(cfg.evaluation.out_dir if lead else None, cfg.checkpoint_root() if lead else None):
                check_paths(cfg, job_cell=plan.paths.job_cell)   # under the lock: a run that wrote there since
                # the run directory's identity
                run_id = (run_id_of(cfg.evaluation.out_dir) or new_run_id()) if lead else None
                if lead:
                    claim_checkpoints(cfg, run_id)   # the folder is this run directory's; a copied one forks its own
                return _train(cfg, built, signals, run_id, plan.late_warning)


def build_run(cfg: TrainConfig) -> Run:
    """The run of `cfg`, planned and built but not trained (its state, mesh and step, e.g.
    to restore a checkpoint into): `assemble_run(plan_run(cfg))`."""
    return assemble_run(plan_run(cfg))


def _train(cfg: TrainConfig, run: Run, signals: StopSignals, run_id: str | None, late_warning: bool = True) -> RunResult:
    lead = jax.process_index() == 0
    distributed.barrier("train-start")   # every process has its data before the first collective
    identity = run_identity(cfg, data_fingerprint(run.loader.table)) if cfg.checkpoint_root() is not None else None
    ckpt, start, state, history = _restore(cfg, run, lead, identity)
    out_dir = open_run_dir(cfg, run, run_id) if cfg.evaluation.out_dir and lead else None   # one writer: process 0
    log = RunLog(log_settings(cfg), run.timing, out_dir, start, history, distributed.to_host,
                 _progress(cfg, start) if lead else None, lead, samples=run.samples)
    step_fn = guard_nonfinite(run.step_fn) if cfg.checkpoints.nonfinite == "skip" else run.step_fn
    try:
        t0 = time.perf_counter()
        compiled = step_fn.lower(state, parallel.global_batch(run.loader.batch(start), run.mesh)).compile()
        compile_time = time.perf_counter() - t0
        if signals.signum is not None and not distributed.is_multiprocess():
            _halt(signals.signum, start, ckpt if start else None)   # stopped during start-up
        if not log.evals:
            evaluate_run(run, state, log, start)
        log.tick()
        for t, batch in run.loader.iterate(start, cfg.optim.steps):
            state, metrics = compiled(state, batch)
            log.add_step(t, metrics)
            pace(metrics["loss"])   # the compiled step does not pace itself (core/pacing.py)
            if replicas_read_after(cfg, t):
                log.add_replica_metrics(t, pace(replica_metrics(state.params)))
            due = step_due(cfg, t, ckpt is not None, signals.signum is not None)
            if due.flush:
                bad = log.flush(t)   # before a save: a checkpoint never holds an unchecked step
                if bad is not None:
                    raise nonfinite_error(bad, cfg, ckpt)
                if due.eval:
                    evaluate_run(run, state, log, t + 1)
                if due.save:
                    ckpt.save(t + 1, state, {"identity": identity, "seed": cfg.optim.seed,
                                             "lr_schedule_steps": run.cfg.lr_schedule_length,
                                             **log.checkpoint_meta()})
                log.tick()
            if due.halt:
                _halt(signals.signum, t + 1, ckpt)
        if start >= cfg.optim.steps and (not log.evals or log.evals[-1]["step"] != cfg.optim.steps):
            evaluate_run(run, state, log, cfg.optim.steps)   # resumed a finished run
    finally:
        log.close()
        if ckpt is not None:
            try:
                ckpt.wait()
            finally:
                ckpt.close()
    return finished_run(cfg, run, state, log, out_dir, compile_time, start, lead and late_warning)


def finished_run(cfg: TrainConfig, run: Run, state, log: RunLog, out_dir: Path | None, compile_time: float,
                 start: int, warn: bool) -> RunResult:
    """The run's closing figures, written (evals.json, final.json) and returned: one ending
    for a lone run and a cell trained in a batch (cell_batch.py); `warn`: print the
    after-run warning (an adaptive method that never synced after its warm-up)."""
    final = {**log.final(run.description, compile_time, start), "layout": run.layout,
             **replica_figures(run, state, log)}
    if warn:   # an adaptive method that never synced after its warm-up: not the method's result
        late = no_sync_after_warmup_warning(run.strategy, log.records, cfg.optim.steps)
        if late:
            print(late, file=sys.stderr, flush=True)
    if out_dir:
        write_record(RunDir(out_dir).evals, log.evals)
        write_record(RunDir(out_dir).final, final)
    return RunResult(cfg, log.records, log.evals, final, state, cfg.method.strategy, run.timing)


def replicas_read_after(cfg: TrainConfig, t: int) -> bool:
    """Whether the run reads its replicas (divergence, correlation) after step t: every
    `divergence_every` steps, else at every metric read."""
    return (t + 1) % (cfg.evaluation.divergence_every or cfg.evaluation.log_every) == 0


def step_due(cfg: TrainConfig, t: int, checkpointing: bool, signalled: bool) -> Due:
    last = t + 1 == cfg.optim.steps
    boundary = (t + 1) % cfg.evaluation.log_every == 0 or last
    # every process must stop at the same step: multi-host agrees at log reads
    if distributed.is_multiprocess():
        halt = boundary and distributed.agree_any(signalled)
    else:
        halt = signalled
    halt = halt and not last   # a signal during the last step: just finish
    eval_due = (t + 1) % cfg.evaluation.eval_every == 0 or last
    every = cfg.checkpoints.checkpoint_every
    save = checkpointing and (last or halt or bool(every and (t + 1) % every == 0))
    return Due(boundary or eval_due or save or halt, eval_due, save, halt)


def evaluate_run(run: Run, state, log: RunLog, step: int) -> None:
    params, model_state = evaluation_weights(state, run.strategy)
    if distributed.is_multiprocess():   # global arrays -> host copies, evaluated by each process
        params, model_state = distributed.to_host((params, model_state))
    result = run.evaluate(params, model_state, run.test)
    if run.cfg.evaluation.eval_replicas == "every":
        result.update(evaluate_replicas(run, state))
    log.add_eval(step, result)


def replica_figures(run: Run, state, log: RunLog) -> dict:
    """Each replica's own accuracy at the end of the run (replica_eval.py): evaluated now
    (eval_replicas "final"), or the last evaluation's ("every")."""
    keys = ("replica_accuracy", "replica_loss")
    if run.cfg.evaluation.eval_replicas == "off":
        return {}
    if run.cfg.evaluation.eval_replicas == "every" and all(k in log.evals[-1] for k in keys):
        return {k: log.evals[-1][k] for k in keys}
    return evaluate_replicas(run, state)


def _restore(cfg: TrainConfig, run: Run, lead: bool, identity: dict | None):
    """(checkpointer or None, first step, state, the checkpoint's meta); a checkpoint of
    another `identity` (settings, data) is refused."""
    root = cfg.checkpoint_root()
    if root is None:
        return None, 0, run.state, {}
    ckpt = Checkpointer(root, run.mesh, keep=cfg.checkpoints.keep)
    if not cfg.checkpoints.resume:
        return ckpt, 0, run.state, {}
    try:
        restored = ckpt.restore_latest(run.state, identity, max_step=cfg.optim.steps)
    except BaseException:
        ckpt.close()
        raise
    if restored is None:
        start, state, history = 0, run.state, {}
    else:
        start, state, history = restored.step, restored.state, restored.meta
        _check_schedule_length(run, history, ckpt)
    if lead:
        print(f"jaxsel: resuming from the checkpoint of step {start} in {ckpt.directory}" if start
              else f"jaxsel: no checkpoint in {ckpt.directory} yet; starting from step 0",
              file=sys.stderr, flush=True)
    return ckpt, start, state, history


def _check_schedule_length(run: Run, meta: dict, ckpt) -> None:
    """A run built with other LR milestones than its checkpoint's (a run built before the
    checkpoint's length was known, `resumed_settings`) must not continue silently."""
    recorded, length = meta.get("lr_schedule_steps"), run.cfg.lr_schedule_length
    fractional = any(m < 1 for m in parse_lr_schedule(run.cfg.optim.lr_schedule)[1])
    if recorded is not None and int(recorded) != length and fractional:
        ckpt.close()
        raise CheckpointMismatch(f"checkpoint in {ckpt.directory} was written by a run whose fractional "
                                 f"--lr-schedule milestones refer to {recorded} steps, this run's to {length}; "
                                 f"build the run with lr_schedule_steps={recorded}")


def open_run_dir(cfg: TrainConfig, run: Run, run_id: str | None) -> Path:
    """The run directory with what the run is: its settings, where its checkpoints go (a
    resumed run finds them there, whatever the working directory), its identity (which its
    checkpoint folder's owner file records too: rundir/owner.py), its strategy as built
    and what it runs on (environment.py)."""
    out = Path(cfg.evaluation.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    root = cfg.checkpoint_root()
    files = RunDir(out)
    write_record(files.config, {**dataclasses.asdict(cfg), "layout": run.layout, "packing_choice": run.packing_choice,
                              "checkpoint_root": str(root.absolute()) if root is not None else None,
                              "run_id": run_id})
    write_record(files.environment, environment(run.layout, run.loader.describe(), run.packing_choice))
    write_record(files.strategy, {"name": cfg.method.strategy, "description": run.description, "timing": run.timing})
    return out


def _halt(signum: int | None, step: int, ckpt) -> None:
    if ckpt is not None:
        ckpt.wait()
    raise TrainingInterrupted(signum or signal.SIGTERM, step, str(ckpt.directory) if ckpt is not None else None)


def nonfinite_error(rec: dict, cfg: TrainConfig, ckpt) -> NonFiniteError:
    step = rec["step"]
    if cfg.checkpoints.nonfinite == "skip":
        what = f"{MAX_CONSECUTIVE_SKIPS} consecutive steps were non-finite (the state itself may be)"
    else:
        what = f"non-finite {describe_nonfinite(rec)}"
    if ckpt is not None:
        ckpt.wait()
        good = ckpt.latest_step()
        kept = (f"the last good checkpoint is step {good} in {ckpt.directory} (continue from it with "
                f"--resume after lowering --lr or setting --clip-norm, or use --nonfinite skip)"
                if good is not None else f"no checkpoint was written yet to {ckpt.directory}")
    else:
        kept = "checkpointing is off, nothing to roll back to"
    return NonFiniteError(f"{what} at step {step}; training stopped, {kept}", step)


def log_settings(cfg: TrainConfig) -> LogSettings:
    """The sections and values a run's log reads (RunLog gets these, not the record): built
    here for every loop that keeps a run log (this one, a batch of cells')."""
    return LogSettings(cfg.optim, cfg.projection, cfg.evaluation, cfg.placement.replicas, cfg.checkpoints.nonfinite,
                       run_name(cfg.evaluation, cfg.method.strategy), dataclasses.asdict(cfg))


def _progress(cfg: TrainConfig, start: int):
    if not cfg.evaluation.progress:
        return None
    from tqdm.auto import tqdm

    bar = tqdm(total=cfg.optim.steps, desc=f"{cfg.method.strategy:>9}", unit="step", leave=True,
               dynamic_ncols=True, mininterval=0.2 if sys.stderr.isatty() else 5.0)
    if start:
        bar.update(start)
    return bar
