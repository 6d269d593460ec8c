"""Cells that share a program, trained as one: a leading cell axis over the jitted step.

A long job's cells (analysis/cells.py) that differ only in their seed (model init, data
order, the loss's keys) run the same program on other numbers. Trained one by one, each
pays the per-step overhead of a tiny model alone (dispatch, collectives among simulated
devices, host reads); here C of them run as one jitted step, `jax.vmap` over a leading
cell axis of (state, batch) around the lone run's own shard_map'd step (core/step.py,
unchanged). A sync decision that differs between cells makes the step's `lax.cond` a
select under the vmap: both branches are computed for every cell, collectives included,
and each cell keeps its own branch's values. The single-cell path never comes here: a
lone run's cond stays a real conditional.

Everything else is each cell's own, exactly as a lone run keeps it: its run plan, data
loader, evaluations, run log and run directory (config.json, environment.json,
strategy.json, metrics.jsonl, evals.json, final.json, the same bytes but for the wall
times), read back per cell from one fetch of the window's metrics. Evaluations and the
replica reads run on each cell's own slice of the state, by the lone run's functions.

Which cells batch (`why_alone`, `share_program`): those whose settings agree but for the
seed and the run directory and whose strategies, as built, are equal; a strategy that
draws from the run's seed as a constant of its program (SPARTA's entries, islands,
syncswitch's stragglers) builds unequal per seed and its cells run alone. Runs that
checkpoint, skip non-finite steps or span processes run alone too: a job's cells do none
of that, a stopped cell is trained again from its first step.
"""
from __future__ import annotations

import contextlib
import dataclasses
import time
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

from ..core import packing
from ..core.cell_axis import cells_batched
from ..core.correlation import replica_metrics
from ..core.pacing import pace
from ..core.parallel import global_batch
from ..core.step import resolve_packing
from . import distributed
from ..core.state import TrainState
from .config import TrainConfig
from .faults import NonFiniteError, StopSignals, TrainingInterrupted
from .plan import RunPlan, created_dirs, plan_run
from .run import Run, assemble_run, check_paths
from .rundir.lock import lock_run
from .rundir.owner import new_run_id, run_id_of
from .runlog import RunLog, stack_steps
from .train import RunResult, evaluate_run, finished_run, log_settings, nonfinite_error, open_run_dir, step_due


def why_alone(cfg: TrainConfig) -> str | None:
    """Why a cell of `cfg` cannot train in a batch (None: it can)."""
    if cfg.checkpoint_root() is not None:
        return "it checkpoints"
    if cfg.checkpoints.nonfinite != "stop":
        return f"nonfinite={cfg.checkpoints.nonfinite!r} skips steps"
    if distributed.is_multiprocess():
        return "it spans processes"
    if cfg.evaluation.tensorboard or cfg.evaluation.wandb_project:
        return "it writes dashboards (one writer per run and process)"
    return None


#: the settings two cells of one program may differ in
PER_CELL = frozenset({"seed", "out_dir", "run_group", "progress"})


def program_of(plan: RunPlan) -> list:
    """What two cells must agree on to share a program: their settings less the seed and
    where they are written (`PER_CELL`)."""
    return [(f.name, getattr(plan.cfg, f.name)) for f in dataclasses.fields(plan.cfg) if f.name not in PER_CELL]


def share_program(plans: list[RunPlan]) -> list[list[int]]:
    """`plans`' indices in groups that train as one (first appearance order; a cell that
    must run alone is a group of its own): same `program_of`, equal strategies."""
    groups: list[tuple[list, object, list[int]]] = []
    alone: list[list[int]] = []
    for i, plan in enumerate(plans):
        if why_alone(plan.cfg) is not None:
            alone.append([i])
            continue
        key = program_of(plan)
        strategy = seedless(plan.strategy)
        home = next((g for g in groups if g[0] == key and g[1] == strategy), None)
        if home is None:
            groups.append((key, strategy, [i]))
        else:
            home[2].append(i)
    return sorted([g[2] for g in groups] + alone, key=lambda g: g[0])


def seedless(strategy):
    """`strategy` with the run's seed it takes (if any) set to 0: strategies equal so may
    still differ in their seed, which `same_program` tells apart."""
    if dataclasses.is_dataclass(strategy) and any(f.name == "seed" for f in dataclasses.fields(strategy)):
        return dataclasses.replace(strategy, seed=0)
    return strategy


class NotOneProgram(ValueError):
    """Cells whose steps are not one program (a strategy that draws from the run's seed)."""


def same_program(runs: list[Run]) -> bool:
    """Whether the cells' steps lower to one program: two cells of other seeds suffice (a
    seed that enters the program as a constant, SPARTA's draw, makes them differ); a lone
    cell is compared with its twin of the next seed, so that whether a cell batches never
    depends on how many of its job's cells are left to train."""
    if len(runs) == 1:
        cfg = runs[0].cfg
        twin = plan_run(dataclasses.replace(cfg, seed=cfg.optim.seed + 1), job_cell=True)   # nothing is created
        if twin.strategy == runs[0].strategy:
            return True
        runs = [runs[0], assemble_run(twin)]
    if all(run.strategy == runs[0].strategy for run in runs):   # no seed in the strategy: one program
        return True
    texts = {run.train_step.lower(run.state, global_batch(run.loader.batch(0), run.mesh)).as_text()
             for run in runs[:2]}
    return len(texts) == 1


@dataclasses.dataclass
class Lane:
    """One cell's side of a batch: its built run, settings, log and run directory; `failed`
    once it stopped on a non-finite value (its rows so far written, as a lone run's are)."""

    run: Run
    cfg: TrainConfig
    log: RunLog
    out_dir: Path | None
    late_warning: bool = True   # the plan's: print the after-run warning
    failed: NonFiniteError | None = None


def cell_step(run: Run):
    """The lone run's jitted step (its packing loop, as chosen for the run) with its data
    transform in front: one cell's program, to be vmapped."""
    jitted = run.train_step.jitted
    if isinstance(jitted, packing.AutoLoop):
        loop = run.packing_choice["loop"] if run.packing_choice else resolve_packing("auto", run.mesh, 1)
        jitted = jitted.jitted(loop)
    transform = run.plan.data.device_transform if run.plan is not None else None
    if transform is None:
        return jitted
    return lambda state, batch: jitted(state, transform(batch, state.step))


#: vmap axes of a batch's state: every field on the cell axis but the step counter, which
#: the cells share (they are all at one step), so a decision made from the step alone (local
#: SGD's period, a schedule) stays one real `lax.cond`; one made from a cell's values
#: (SelSync's gradient norms) is batched, and the cond a select over the cells
CELL_AXES = TrainState(step=None, params=0, opt_state=0, model_state=0, strategy_state=0)


def batched_step(run: Run):
    """One jitted step of (stacked state, each cell's batch as the lone run places it): the
    batches stacked on the cell axis inside the program, then the cell vmap; the state is
    donated."""
    over_cells = jax.vmap(cell_step(run), in_axes=(CELL_AXES, 0), out_axes=(CELL_AXES, 0))

    def step(state, batches: tuple):
        return over_cells(state, jax.tree.map(lambda *xs: jnp.stack(xs), *batches))

    return jax.jit(step, donate_argnums=(0,))


#: every cell's replica reads (divergence, correlation) in one program, left on the device
cells_replica_metrics = jax.jit(jax.vmap(replica_metrics))


def _with_cell_axis(x) -> NamedSharding:
    return NamedSharding(x.sharding.mesh, P(None, *x.sharding.spec))


def _cell_fields(state) -> TrainState:
    """`state` less its step counter (the fields on the cell axis)."""
    return state.replace(step=None)


def stack_cells(states: list):
    """The cells' states on one leading axis (`CELL_AXES`: the step shared), each device
    holding its replicas of every cell."""
    shardings = jax.tree.map(_with_cell_axis, _cell_fields(states[0])).replace(step=states[0].step.sharding)

    def stack(*cells):
        return jax.tree.map(lambda *xs: jnp.stack(xs), *map(_cell_fields, cells)).replace(step=cells[0].step)

    return jax.jit(stack, out_shardings=shardings)(*states)


def unstacker(state, count: int):
    """A jitted function of the stacked state: each cell's state, placed as a lone run's."""
    shardings = jax.tree.map(lambda x: x.sharding, state)
    return jax.jit(lambda s: [jax.tree.map(lambda x: x[c], _cell_fields(s)).replace(step=s.step)
                              for c in range(count)], out_shardings=[shardings] * count)


def place_batches(hosts: tuple, mesh) -> tuple:
    """The cells' host batches of one step, each placed as a lone run places it."""
    return tuple(global_batch(host, mesh) for host in hosts)


def train_cells(plans: list[RunPlan], *, tolerate_faults: bool = False,
                on_start=None) -> list[RunResult | NonFiniteError]:
    """Train the cells of `plans` (one `share_program` group) as one batch; each cell's
    result as its lone `train` returns it, or, `tolerate_faults`, the NonFiniteError that
    stopped it (else the first such error is raised). A stop signal raises
    TrainingInterrupted: no cell of the batch is finished. Cells whose steps turn out not
    to be one program raise NotOneProgram before anything is written; `on_start()` is
    called once they are known to be one."""
    refused = [why for why in map(why_alone, (p.cfg for p in plans)) if why]
    if refused:
        raise ValueError(f"a cell cannot train in a batch: {refused[0]}")
    with StopSignals(checkpointing=False) as signals, contextlib.ExitStack() as held:
        runs = [assemble_run(plan) for plan in plans]
        if any(seedless(r.strategy) != seedless(runs[0].strategy) for r in runs) or not same_program(runs):
            raise NotOneProgram("the cells' steps are not one program: they train one by one")
        if on_start is not None:
            on_start()
        lanes = [_open_lane(plan, run, held) for plan, run in zip(plans, runs)]
        return _train_lanes(lanes, signals, held, tolerate_faults)


def _open_lane(plan: RunPlan, run: Run, held: contextlib.ExitStack) -> Lane:
    """A cell's directory made, locked and checked (as `train` does), its records begun."""
    cfg = held.enter_context(created_dirs(plan, True))
    run = dataclasses.replace(run, cfg=cfg)
    held.enter_context(lock_run(cfg.evaluation.out_dir, None))
    check_paths(cfg, job_cell=plan.paths.job_cell)
    out_dir = open_run_dir(cfg, run, run_id_of(cfg.evaluation.out_dir) or new_run_id()) if cfg.evaluation.out_dir else None
    log = RunLog(log_settings(cfg), run.timing, out_dir, 0, {}, lambda tree: tree, None, True, samples=run.samples)
    held.callback(log.close)
    return Lane(run, cfg, log, out_dir, plan.late_warning)


#: the fewest cells a batch computes: XLA compiles a cell axis of 1 as no axis (other bits),
#: so a lone cell of a batch is computed beside a copy of itself (measured: a cell's bits are
#: the same in batches of 2 and 3, and differ in a batch of 1)
FEWEST = 2


def _train_lanes(lanes: list[Lane], signals: StopSignals, held: contextlib.ExitStack,
                 tolerate_faults: bool) -> list:
    first, cfg = lanes[0].run, lanes[0].cfg
    pad = max(0, FEWEST - len(lanes))   # copies of the first cell, computed and dropped
    state = stack_cells([lane.run.state for lane in lanes] + [first.state] * pad)
    unstack = unstacker(first.state, len(lanes) + pad)
    for lane in lanes:
        lane.run = dataclasses.replace(lane.run, state=None)   # the stacked state holds it now
    computed = lanes + lanes[:1] * pad   # each cell's data, the first's again for each copy
    feeds = [lane.run.loader.host_batches(0, cfg.optim.steps, cfg.data.prefetch) for lane in computed]
    for feed in feeds:
        held.callback(feed.close)
    step = batched_step(first)
    t0 = time.perf_counter()
    with cells_batched():   # the collectives' rules see the cell vmap (core/cell_axis.py)
        compiled = step.lower(state, place_batches(tuple(lane.run.loader.batch(0) for lane in computed),
                                                   first.mesh)).compile()
    compile_time = time.perf_counter() - t0
    _evaluate(lanes, unstack(state), 0)
    window: list[tuple[int, dict]] = []
    reads: dict[int, dict] = {}   # step -> every cell's replica reads, on the device
    _tick(lanes)
    for t, hosts in zip(range(cfg.optim.steps), zip(*feeds)):
        state, metrics = compiled(state, place_batches(tuple(h for _, h in hosts), first.mesh))
        window.append((t, metrics))
        pace(metrics["loss"])
        if (t + 1) % (cfg.evaluation.divergence_every or cfg.evaluation.log_every) == 0:
            reads[t] = cells_replica_metrics(state.params)
        due = step_due(cfg, t, False, signals.signum is not None)
        if due.flush:
            _flush(lanes, window, reads, t, tolerate_faults)
            window, reads = [], {}
            if due.eval:
                _evaluate(lanes, unstack(state), t + 1)
            _tick(lanes)
        if due.halt:
            raise TrainingInterrupted(signals.signum, t + 1, None)
    finals = unstack(state)
    return [lane.failed if lane.failed is not None else
            finished_run(lane.cfg, lane.run, view, lane.log, lane.out_dir, compile_time, 0, lane.late_warning)
            for lane, view in zip(lanes, finals)]


def _tick(lanes: list[Lane]) -> None:
    for lane in lanes:
        lane.log.tick()


def _evaluate(lanes: list[Lane], views: list, step: int) -> None:
    for lane, view in zip(lanes, views):
        if lane.failed is None:
            evaluate_run(lane.run, view, lane.log, step)


def _flush(lanes: list[Lane], window: list[tuple[int, dict]], reads: dict, t: int, tolerate_faults: bool) -> None:
    """The window's metrics and replica reads of every cell in one transfer, each cell's
    rows logged by its own RunLog; a cell whose rows turn non-finite stops there (raised
    unless tolerated)."""
    fetched, reads = jax.device_get((stack_steps([m for _, m in window]), reads))
    for c, lane in enumerate(lanes):
        if lane.failed is not None:
            continue
        for i, (step, _) in enumerate(window):
            lane.log.add_step(step, {name: values[i, c] for name, values in fetched.items()})
        for step, values in reads.items():
            lane.log.add_replica_metrics(step, {name: v[c] for name, v in values.items()})
        bad = lane.log.flush(t)
        if bad is not None:
            lane.failed = nonfinite_error(bad, lane.cfg, None)
            if not tolerate_faults:
                raise lane.failed
