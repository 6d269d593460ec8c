"""One plan per run: what a run is, decided once, before anything is written.

`plan_run(cfg)` is the one place a run's settings become a run: the settings a resume
takes from the run it continues (`run.resumed_settings`), every check of them
(`check_config`), the layout of its replicas on the devices, the lock and filesystem checks
of its directories (`run.check_paths`), its data, and its strategy, built once with the
facts the data gives (steps per epoch, the training set's size). `train(plan)` trains it;
`jaxsel train`, every cell of `jaxsel compare` and `jaxsel frontier`, and a library user's
`train(cfg)` all go through it, so nothing is built twice and no check runs in two
places. Nothing is created or printed here: the run's directories are made by
`created_dirs`, once the run is built and its memory and disk estimates have passed, and
a plan made with `announce` says where its records go when they exist.
A long job asks the plan too: `strategy_of` and `layout_of` build a cell's strategy and
layout for the job's checks, labels and layout line, each once per job (job_builds.py).
"""
from __future__ import annotations

import contextlib
import dataclasses
import sys
from pathlib import Path
from typing import Any, Iterator, Sequence

from ..core import parallel
from ..data.pipeline import Input, build_input
from . import distributed
from .config import TrainConfig, check_config
from .lr_schedule import RunSamples
from .job_builds import built_once
from .run import check_paths, make_layout, make_strategy, named_now, resumed_settings, start_warnings, strategy_inputs
from .rundir.lock import check_unlocked


@dataclasses.dataclass(frozen=True)
class RunPaths:
    """Where a run writes: its run directory (None: nowhere), and whether that is a default
    name to claim afresh (`runs/<strategy>-<time>`, or -2, -3, ... when another run took it
    meanwhile), its checkpoint folder (None: no checkpoints), and whether it is a cell of a
    long job, inside the job's directory that no other run may write (run_kinds.py)."""

    out_dir: str | None
    claim: bool
    checkpoint_root: Path | None
    job_cell: bool = False


@dataclasses.dataclass
class RunPlan:
    """A run decided: its settings as resolved and checked, the layout of its replicas, its
    data, its strategy as built, where it writes, and whether it says so (`announce`: the
    command line's header, printed once the directories exist)."""

    cfg: TrainConfig
    layout: parallel.Layout
    data: Input
    strategy: Any
    samples: RunSamples
    paths: RunPaths
    announce: tuple[str, ...] = ()   # lines printed after "run directory: ..." (empty: say nothing)
    warnings: tuple[str, ...] = ()   # one line each on stderr, printed once the run's directories exist
    late_warning: bool = True        # print the after-run warning (a job that notes it in its table: False)

    @property
    def loader(self):
        """The run's loader (tests and hooks act inside it)."""
        return self.data.loader

    @property
    def mesh(self):
        return self.layout.mesh


def plan_run(cfg: TrainConfig, *, claim: bool = False, announce: Sequence[str] | None = None,
             job_cell: bool = False) -> RunPlan:
    """The plan of `cfg`: every check a run makes before it builds its model or writes a
    file, its layout, data and strategy built once (a bad value is one ConfigError naming
    it). `claim`: `cfg.out_dir` is a default name, claimed afresh when created. `announce`:
    the run says where it writes, then these lines (the command line's: its task), then its
    layout (None: it says nothing).
    `job_cell`: a cell of the long job whose directory holds `cfg.out_dir` (analysis/cells.py)."""
    cfg = resumed_settings(named_now(cfg))   # options by today's names; a resumed run's checkpoints, LR length
    check_config(cfg)
    layout = layout_of(cfg)
    root = cfg.checkpoint_root()
    check_unlocked(cfg.evaluation.out_dir, root)   # a run in progress is named as such
    check_paths(cfg, job_cell=job_cell)   # before any data is read
    data = run_input(cfg, layout.mesh)   # tables, partition/injection, prefetching loader, transform
    samples = RunSamples(cfg.optim.batch_size, cfg.placement.replicas, len(data.loader.table))
    strategy = strategy_of(cfg, data.loader.partition.steps_per_epoch(cfg.optim.batch_size))
    header = () if announce is None else (*announce, f"layout: {layout.describe()}")
    paths = RunPaths(cfg.evaluation.out_dir, claim, root, job_cell)
    return RunPlan(cfg, layout, data, strategy, samples, paths, header,
                   (*distributed.START_NOTES, *start_warnings(cfg, strategy, samples)))


def strategy_of(cfg: TrainConfig, steps_per_epoch: int = 1):
    """The strategy a run of `cfg` trains with, as its plan builds it (a bad option: one
    ConfigError). A job asks this of its cells (checks, labels, derived points) before their
    data is read: `steps_per_epoch` 1 unless given. Within a job, built once (job_builds.py)."""
    return built_once(("strategy", repr(strategy_inputs(cfg, steps_per_epoch))),
                      lambda: make_strategy(cfg, steps_per_epoch))


def layout_of(cfg: TrainConfig) -> parallel.Layout:
    """The layout of `cfg`'s replicas on the devices, as its plan builds it (replicas that do
    not fit: one ConfigError). Within a job, built once (job_builds.py)."""
    placement = cfg.placement
    return built_once(("layout", repr((placement.replicas, placement.devices, placement.platform))),
                      lambda: make_layout(cfg))


def run_input(cfg: TrainConfig, mesh) -> Input:
    """The run's input pipeline: its data section, and the facts of the others it needs."""
    return build_input(cfg.data, mesh, replicas=cfg.placement.replicas, batch_size=cfg.optim.batch_size,
                       seed=cfg.optim.seed, eval_examples=cfg.evaluation.eval_examples)


@contextlib.contextmanager
def created_dirs(plan: RunPlan, lead: bool) -> Iterator[TrainConfig]:
    """Create the run's directory (`lead`: only process 0 writes) and checkpoint folder,
    their missing parents too, and yield its settings with their final names (a claimed
    default name: one no other run has); a run that fails before writing into them leaves
    none of it behind (`paths.undo_created`). Says where the run writes when the plan
    announces itself."""
    from ..data.paths import first_missing, undo_created, writable_dir
    from .rundir.claim import claim_new_dir

    cfg = plan.cfg
    with contextlib.ExitStack() as undo:
        if lead and plan.paths.out_dir is not None:
            if plan.paths.claim:   # runs/<strategy>-<time>[-N]
                cfg = dataclasses.replace(cfg, out_dir=claim_new_dir(plan.paths.out_dir))
                undo.enter_context(undo_created(cfg.evaluation.out_dir, True))
            else:
                out_dir = cfg.evaluation.out_dir
                top = first_missing(out_dir)
                writable_dir(out_dir, "--out", parents=True, quiet=True)
                undo.enter_context(undo_created(top or out_dir, top is not None))
        root = plan.paths.checkpoint_root
        if lead and root is not None:
            top = first_missing(root)
            writable_dir(root, "--checkpoint-dir", parents=True, quiet=True)
            undo.enter_context(undo_created(top or root, top is not None))
        if lead:   # every check passed: a refused run said only why
            for line in plan.warnings:
                print(line, file=sys.stderr, flush=True)
        if lead and plan.announce:
            print(f"run directory: {cfg.evaluation.out_dir}", flush=True)
            for line in plan.announce:
                print(line, flush=True)
        yield cfg
