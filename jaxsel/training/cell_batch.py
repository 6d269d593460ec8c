"""Cells that share a program, trained as one: a leading cell axis over the jitted step.

A long job's cells (analysis/cells.py) that differ only in their seed (model init, data
order, the loss's keys) or in their method's numeric options (a budget point: a period, a
delta) run the same program on other numbers. Trained one by one, each pays the per-step
overhead of a tiny model alone (dispatch, collectives among simulated devices, host reads);
here C of them run as one jitted program: a `lax.scan` over a window of steps (the window's
data placed on the devices at once) of `jax.vmap` over a leading cell axis of (state,
batch, option values) around the lone run's own shard_map'd step (core/step.py, which
binds each cell's option values into its strategy). A sync decision that differs between
cells (or that reads a cell's option) makes the step's `lax.cond` a select under the vmap:
both branches are computed for every cell, collectives included, and each cell keeps its
own branch's values. The single-cell path never comes here: a
lone run's cond stays a real conditional.

Everything else is each cell's own, exactly as a lone run keeps it: its run plan, data
loader, evaluations, run log and run directory (config.json, environment.json,
strategy.json, metrics.jsonl, evals.json, final.json, the same bytes but for the wall
times), read back per cell from one fetch of the window's metrics. Evaluations and the
replica reads run on each cell's own slice of the state, by the lone run's functions.

Which cells batch (`why_alone`, `share_program`): those whose settings agree but for the
seed, the strategy's entry and the run directory and whose strategies, as built, agree but
for the seed and their cell options' values (core/cell_options.py: a method's budget
points, the seed where a draw takes it as a PRNG key's: SPARTA's entries, islands); a
strategy that draws from the run's seed on the host, a constant of its program
(syncswitch's stragglers), is compared with its twin of the next seed and runs alone.
Runs that checkpoint, skip non-finite steps or span processes run alone too: a job's cells
do none of that, a stopped cell is trained again from its first step.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import math
import time
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P

from ..core.cell_axis import cells_batched
from ..core.cell_options import cell_values, option_values, program_key
from ..core.correlation import replica_metrics
from ..core.parallel import AXIS, global_batch, mesh_of
from ..core.step import resolve_packing
from . import distributed
from ..core.state import TrainState
from .config import TrainConfig
from .faults import NonFiniteError, StopSignals, TrainingInterrupted
from .plan import RunPlan, created_dirs, plan_run
from .run import Run, assemble_run, check_paths
from .rundir.lock import lock_run
from .rundir.owner import new_run_id, run_id_of
from .runlog import RunLog
from .train import (RunResult, evaluate_run, finished_run, log_settings, nonfinite_error, open_run_dir,
                    replicas_read_after, step_due)


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


#: the settings two cells of one program may differ in (their strategies: in `program_key`)
PER_CELL = frozenset({"seed", "out_dir", "run_group", "progress", "strategy", "strategy_options"})


def program_of(plan: RunPlan) -> list:
    """What two cells must agree on to share a program: their settings less the seed, where
    they are written and the strategy's entry (`PER_CELL`), and their built strategies less
    the run's seed and their cell options' values (core/cell_options.py)."""
    return [(f.name, getattr(plan.cfg, f.name)) for f in dataclasses.fields(plan.cfg)
            if f.name not in PER_CELL] + [program_key(seedless(plan.strategy))]


def share_program(plans: list[RunPlan]) -> list[list[int]]:
    """`plans`' indices in groups that train as one (first appearance order; a cell that
    must run alone is a group of its own): the same `program_of`."""
    groups: list[tuple[list, list[int]]] = []
    alone: list[list[int]] = []
    for i, plan in enumerate(plans):
        if why_alone(plan.cfg) is not None:
            alone.append([i])
            continue
        key = program_of(plan)
        home = next((g for g in groups if g[0] == key), None)
        if home is None:
            groups.append((key, [i]))
        else:
            home[1].append(i)
    return sorted([g[1] for g in groups] + alone, key=lambda g: g[0])


def seedless(strategy):
    """`strategy` with the run's seed it takes (if any) set to 0 on a copy (not rebuilt: what
    its constructor settled from the seed, islands' draw, stays, and keeps such strategies
    apart): strategies equal so may still differ in their seed, which `same_program` tells
    apart."""
    if not holds_seed(strategy):
        return strategy
    copied = copy.copy(strategy)
    copied.settle(seed=0)
    return copied


def holds_seed(strategy) -> bool:
    """Whether the strategy has a `seed` field (the run's, where unset)."""
    return dataclasses.is_dataclass(strategy) and any(f.name == "seed" for f in dataclasses.fields(strategy))


def takes_seed(strategy) -> bool:
    """Whether the run's seed may be a constant of the strategy's step: it holds a `seed`
    that is not one of its cell options (those enter as each cell's value: SPARTA's, the
    islands' draw)."""
    return holds_seed(strategy) and "seed" not in option_values(strategy)


class NotOneProgram(ValueError):
    """Cells whose steps are not one program (a strategy that draws from the run's seed)."""


def same_program(runs: list[Run]) -> bool:
    """Whether the cells' steps (their `program_of` equal) lower to one program: they do
    unless their strategy takes the run's seed; then the first cell is compared with its
    twin of the next seed (a seed that enters the program as a constant, syncswitch's
    stragglers, makes them differ), so that whether a cell batches never depends on which cells of its
    job are left to train."""
    first = runs[0]
    if not takes_seed(first.strategy):
        return True
    cfg = first.cfg
    twin = plan_run(dataclasses.replace(cfg, seed=cfg.optim.seed + 1), job_cell=True)   # nothing is created
    if twin.strategy == first.strategy:
        return True
    texts = {run.train_step.lower(run.state, global_batch(run.loader.batch(0), run.mesh)).as_text()
             for run in (first, assemble_run(twin))}
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
    """The lone run's step function (its packing loop, as chosen for the run), with its
    data transform in front: one cell's program `(state, batch, option values)`,
    to be vmapped; the values bind the cell's own options (core/cell_options.py)."""
    loop = run.packing_choice["loop"] if run.packing_choice else resolve_packing("auto", run.mesh, 1)
    # jitted, so the cell vmap batches the traced step (the collectives' rules see it there:
    # core/cell_axis.py), not the tracing of the packed replicas' own vmap
    step = jax.jit(run.train_step.traced(loop))
    transform = run.plan.data.device_transform if run.plan is not None else None
    if transform is None:
        return step
    return lambda state, batch, values: step(state, transform(batch, state.step), values)


#: vmap axes of a batch's state: every field on the cell axis but the step counter, which
#: the cells share (they are all at one step), so a decision made from the step alone (local
#: SGD's period, a schedule) stays one real `lax.cond`; one made from a cell's values
#: (SelSync's gradient norms) is batched, and the cond a select over the cells
CELL_AXES = TrainState(step=None, params=0, opt_state=0, model_state=0, strategy_state=0)


def batched_window(run: Run, length: int):
    """One jitted program of `length` steps of every cell (a `lax.scan` over the window's
    steps of the cell vmap around the lone run's step): the stacked state in (donated),
    each step's batches on leading (step, cell) axes, the cells' option values on the cell
    axis, and the state out with every step's metrics on (step, cell) axes. One dispatch
    and one placement of the data per window, not per step: for a tiny model those per-step
    host costs were most of a batch's time."""
    over_cells = jax.vmap(cell_step(run), in_axes=(CELL_AXES, 0, 0), out_axes=(CELL_AXES, 0))

    def window(state, batches, values):
        return lax.scan(lambda s, b: over_cells(s, b, values), state, batches, length=length)

    return jax.jit(window, donate_argnums=(0,))


#: every cell's replica reads (divergence, correlation) in one program, left on the device
cells_replica_metrics = jax.jit(jax.vmap(replica_metrics))


def _with_cell_axis(x) -> NamedSharding:
    return NamedSharding(x.sharding.mesh, P(None, *x.sharding.spec))


def _cell_fields(state) -> TrainState:
    """`state` less its step counter (the fields on the cell axis)."""
    return state.replace(step=None)


@functools.lru_cache(maxsize=64)
def _stacker(sharding: NamedSharding):
    """Leaves stacked on a new cell axis, placed by `sharding`: one program per leaf shape
    and cell count, shared by every batch of the process (a program per batch compiled its
    cells' whole states: 5.6 s of compiling in the frontier). Not NumPy's stack placed with
    `device_put`: on CPU devices such a buffer may alias the NumPy array, and the first
    window donates the stacked state (a CI run aborted once with that form, in a batch's
    first evaluation: the likely cause, not proven)."""
    return jax.jit(lambda *xs: jnp.stack(xs), out_shardings=sharding)


@functools.lru_cache(maxsize=64)
def _slicer(sharding: NamedSharding):
    """A leaf's cell `c` (a traced index) off the cell axis, placed by `sharding`: one
    program per leaf shape, shared by every cell and batch of the process (a program per
    batch that cut out every cell's state compiled in 0.5 s: 18.5 s of compiling in the
    frontier). A slice copies bits: whichever program cuts it, the cell's state is the same."""
    return jax.jit(lambda x, c: x[c], out_shardings=sharding)


#: a copy of the shared step counter for the cells' states read off a window
_step_copy = jax.jit(jnp.copy)


def stack_cells(states: list):
    """The cells' states on one leading axis (`CELL_AXES`: the step shared), each device
    holding its replicas of every cell."""
    stacked = jax.tree.map(lambda *xs: _stacker(_with_cell_axis(xs[0]))(*xs), *map(_cell_fields, states))
    return stacked.replace(step=_step_copy(states[0].step))   # the first window takes (donates) it


def unstacker(state, count: int):
    """A function of the stacked state: each of its `count` cells' states, placed as a lone
    run's `state` is."""
    shardings = jax.tree.map(lambda x: x.sharding, _cell_fields(state))
    indices = [np.int32(c) for c in range(count)]

    def unstack(stacked) -> list:
        cells, step = _cell_fields(stacked), _step_copy(stacked.step)   # the window after takes (donates) its own
        return [jax.tree.map(lambda x, sharding: _slicer(sharding)(x, c), cells, shardings).replace(step=step)
                for c in indices]

    return unstack


def place_window(steps: list[tuple], mesh):
    """A window's host batches (`steps[i][c]`: step i's batch of cell c) as one array per
    name on leading (step, cell) axes, placed once, each device given its replicas' rows of
    every step and cell (as a lone run places one batch)."""
    sharding = NamedSharding(mesh_of(mesh), P(None, None, AXIS))
    stacked = jax.tree.map(lambda *xs: np.stack(xs).reshape(len(steps), len(steps[0]), *xs[0].shape),
                           *[host for cells in steps for host in cells])
    return jax.tree.map(lambda x: jax.make_array_from_callback(x.shape, sharding, lambda index: x[index]), stacked)


def cells_values(strategies: list, mesh) -> dict:
    """Each cell's option values (core/cell_options.py) stacked on the cell axis, on every
    device."""
    stacked = jax.tree.map(lambda *xs: np.stack(xs), *map(cell_values, strategies))
    return jax.device_put(stacked, NamedSharding(mesh_of(mesh), P()))


def window_ends(cfg: TrainConfig) -> list[int]:
    """The steps each window ends after: every step a lone run reads its metrics, evaluates
    or reads its replicas at (`step_due`, `replicas_read_after`), and the last; so the window's
    metrics are flushed, and the state read, exactly where a lone run's are. Where those
    spans differ in length (reads every 10 steps, evaluations every 25), each is cut into
    windows of their greatest common length, so one program (compiled once) runs them all."""
    ends = [t for t in range(cfg.optim.steps) if step_due(cfg, t, False, False).flush or replicas_read_after(cfg, t)]
    lengths = {b - a for a, b in zip([-1] + ends, ends)}
    common = math.gcd(*lengths)
    if len(lengths) == 1 or common < 2:
        return ends
    return list(range(common - 1, cfg.optim.steps, common))


def train_cells(plans: list[RunPlan], *, tolerate_faults: bool = False, on_start=None,
                signals: StopSignals | None = None, stepping=None) -> list[RunResult | NonFiniteError]:
    """Train the cells of `plans` (one `share_program` group) as one batch; each cell's
    result as its lone `train` returns it, or, `tolerate_faults`, the NonFiniteError that
    stopped it (else the first such error is raised). A stop signal raises
    TrainingInterrupted: no cell of the batch is finished (`signals`: the job's, which a
    batch trained off the main thread reads; else its own). Cells whose steps turn out not
    to be one program raise NotOneProgram before anything is written; `on_start()` is
    called once they are known to be one. `stepping`: a context held while the batch steps,
    entered once its programs are compiled (a job's queue lets one batch compile while
    another steps: analysis/batch_queue.py)."""
    refused = [why for why in map(why_alone, (p.cfg for p in plans)) if why]
    if refused:
        raise ValueError(f"a cell cannot train in a batch: {refused[0]}")
    own = StopSignals(checkpointing=False) if signals is None else contextlib.nullcontext(signals)
    with own as signals, contextlib.ExitStack() as held:
        runs = [assemble_run(plan) for plan in plans]
        if any(program_of(p) != program_of(plans[0]) for p in plans) or not same_program(runs):
            raise NotOneProgram("the cells' steps are not one program: they train one by one")
        if on_start is not None:
            on_start()
        lanes = [_open_lane(plan, run, held) for plan, run in zip(plans, runs)]
        return _train_lanes(lanes, signals, held, tolerate_faults,
                            contextlib.nullcontext() if stepping is None else stepping)


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
                 tolerate_faults: bool, stepping) -> list:
    first, cfg = lanes[0].run, lanes[0].cfg
    pad = max(0, FEWEST - len(lanes))   # copies of the first cell, computed and dropped
    state = stack_cells([lane.run.state for lane in lanes] + [first.state] * pad)
    unstack = unstacker(first.state, len(lanes) + pad)
    for lane in lanes:
        lane.run = dataclasses.replace(lane.run, state=None)   # the stacked state holds it now
    computed = lanes + lanes[:1] * pad   # each cell's data, the first's again for each copy
    windows = WindowFeed([lane.run.loader for lane in computed], window_ends(cfg), cfg.data.prefetch,
                              first.mesh, held)
    values = cells_values([lane.run.strategy for lane in computed], first.mesh)
    t0 = time.perf_counter()
    programs = compile_windows(first, state, windows, values)
    compile_time = time.perf_counter() - t0
    _evaluate(lanes, unstack(state), 0)
    with stepping:
        _tick(lanes)
        ran = None   # the window dispatched last: logged while the devices run the next one
        for (start, end), batches in windows:
            state, metrics = programs[end + 1 - start](state, batches, values)
            reads = {end: cells_replica_metrics(state.params)} if replicas_read_after(cfg, end) else {}
            # the cells' states read before the next window takes (donates) the stacked one
            views = unstack(state) if step_due(cfg, end, False, False).eval else None
            windows.ahead()   # the next window's data built while the devices run this one
            if ran is not None:
                _finish_window(lanes, ran, tolerate_faults, signals)
            ran = RanWindow(range(start, end + 1), metrics, reads, views)
        _finish_window(lanes, ran, tolerate_faults, signals)
        finals = ran.views if ran.views is not None else unstack(state)   # (the last step is evaluated)
    return [lane.failed if lane.failed is not None else
            finished_run(lane.cfg, lane.run, view, lane.log, lane.out_dir, compile_time, 0, lane.late_warning)
            for lane, view in zip(lanes, finals)]


def compile_windows(run: Run, state, windows: "WindowFeed", values) -> dict:
    """Each window length's program (`batched_window`), compiled before the batch steps, so
    that it can compile while another batch steps (analysis/batch_queue.py): lowered on the
    first window's data, whose arrays the other lengths' share but for their leading axis."""
    first = windows.peek()
    programs = {}
    with cells_batched():   # the collectives' rules see the cell vmap (core/cell_axis.py)
        for length in windows.lengths:
            shaped = jax.tree.map(lambda x: jax.ShapeDtypeStruct((length, *x.shape[1:]), x.dtype,
                                                                 sharding=x.sharding), first)
            programs[length] = batched_window(run, length).lower(state, shaped, values).compile()
    return programs


class WindowFeed:
    """Each window's (first step, last step) and its cells' batches placed on the devices
    (`place_window`), one window ahead: `ahead()` builds the next while the devices run the
    current one. Tables in memory are gathered here, on the training thread (a quarter of
    a millisecond a batch: cheaper than a thread per cell handing them over); loaders that
    decode on worker processes feed through their own `host_batches`."""

    def __init__(self, loaders: list, ends: list[int], prefetch: int, mesh, held: contextlib.ExitStack):
        self.spans = list(zip([0] + [e + 1 for e in ends[:-1]], ends))
        self.mesh, self.loaders, self.next = mesh, loaders, None
        self.feeds = None
        if any(loader.processes for loader in loaders):
            feeds = [loader.host_batches(0, ends[-1] + 1, prefetch) for loader in loaders]
            for feed in feeds:
                held.callback(feed.close)
            self.feeds = zip(*feeds)

    def _build(self, start: int, end: int):
        if self.feeds is not None:
            steps = [tuple(host for _, host in next(self.feeds)) for _ in range(start, end + 1)]
        else:
            steps = [tuple(loader.batch(t) for loader in self.loaders) for t in range(start, end + 1)]
        return place_window(steps, self.mesh)

    @property
    def lengths(self) -> set[int]:
        """The windows' lengths (steps)."""
        return {end + 1 - start for start, end in self.spans}

    def ahead(self) -> None:
        if self.spans and self.next is None:
            self.next = self._build(*self.spans[0])

    def peek(self):
        """The next window's batches (built now if not yet)."""
        self.ahead()
        return self.next

    def __iter__(self):
        while self.spans:
            self.ahead()
            batches, self.next = self.next, None
            yield self.spans.pop(0), batches


class RanWindow(NamedTuple):
    """A window dispatched to the devices: its steps, its metrics and replica reads (still
    computing), and the cells' states after it where an evaluation is due."""

    steps: range
    metrics: dict
    reads: dict
    views: list | None


def _finish_window(lanes: list[Lane], ran: RanWindow, tolerate_faults: bool, signals: StopSignals) -> None:
    """The host's side of a window, done while the devices run the next one: a cell's rows,
    evaluations and a stop come after the very steps a lone run's do (the next window, already
    dispatched, is dropped with the batch on a stop or an error)."""
    end = ran.steps[-1]
    due = step_due(lanes[0].cfg, end, False, signals.signum is not None)
    _log_window(lanes, ran.steps, ran.metrics, ran.reads, end if due.flush else None, tolerate_faults)
    if due.eval:
        _evaluate(lanes, ran.views, end + 1)
    _tick(lanes)
    if due.halt:
        raise TrainingInterrupted(signals.signum, end + 1, None)


def _tick(lanes: list[Lane]) -> None:
    for lane in lanes:
        lane.log.tick()


def _evaluate(lanes: list[Lane], views: list, step: int) -> None:
    for lane, view in zip(lanes, views):
        if lane.failed is None:
            evaluate_run(lane.run, view, lane.log, step)


def _log_window(lanes: list[Lane], steps: range, metrics: dict, reads: dict, flush_at: int | None,
                tolerate_faults: bool) -> None:
    """The window's metrics (leading axes: step, cell) and replica reads of every cell in
    one transfer, each cell's rows given to its own RunLog, which flushes them where a lone
    run's does (`flush_at`); a cell whose rows turn non-finite stops there (raised unless
    tolerated)."""
    fetched, reads = jax.device_get((metrics, reads))
    for c, lane in enumerate(lanes):
        if lane.failed is not None:
            continue
        for i, step in enumerate(steps):
            lane.log.add_step(step, {name: values[i, c] for name, values in fetched.items()})
        for step, values in reads.items():
            lane.log.add_replica_metrics(step, {name: v[c] for name, v in values.items()})
        bad = lane.log.flush(flush_at) if flush_at is not None else None
        if bad is not None:
            lane.failed = nonfinite_error(bad, lane.cfg, None)
            if not tolerate_faults:
                raise lane.failed
