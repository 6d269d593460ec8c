"""`jaxsel frontier`: at the bytes a user can afford, which method gives the best model?

Every method is swept over its budget knob (the small grid its strategy declares,
`method_traits(budget=...)`; `--grid` entries replace a method's points) on one task and partition,
each point over the same seeds, every cell a real run (`cells.py`) made exactly as the lone
`jaxsel compare` run of that configuration and seed makes it. Plain BSP always runs first:
the budget levels are shares of its bytes, and a point given as "fires:F" (SelSync's
delta) is derived from its runs' gradient norms (`frontier_points.py`, recorded in
derived_points.json before such a point runs). `frontier_report.py` turns the cells into each
method's accuracy-against-MB curve and Pareto front, the verdict table at the budget
levels, and frontier.json, frontier.md and frontier.png.

Each adaptive, trigger-based point (SelSync at any delta, in either order, with or without
`max_local`) is followed by its same-order baseline (`matched_budget.same_order_variant`):
the same method with only its trigger replaced by a spread schedule of exactly as many
syncs (the point's mean over seeds, rounded), run on the same seeds, as `jaxsel compare`
runs it; the report says per budget whether the selection beat that schedule (issue 58).

The job is the comparison's kind of long job: locked while it runs, recorded in job.json,
resumable (`resume`) without running a finished cell again, and `report_frontier` makes
its files again from the records. A cell that stops on a non-finite loss is recorded as
failed and the sweep goes on; its point is left off the fronts and named in frontier.md.
task.json holds the task as `jaxsel compare --config` reads it, so each cell's command in
frontier.md regenerates it.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from ..core.options import OptionError
from ..strategies.traits import traits_of
from ..training.config import ConfigError, TrainConfig
from ..training.job_builds import one_job
from ..training.rundir import DERIVED_FILE, FRONTIER_FILE, FRONTIER_TABLE, METRICS_FILE, TASK_FILE
from ..training.rundir.job_files import TASK, write_job_file
from . import job
from .batch_queue import job_queue
from .cells import Cells, FailedCell, row_config
from .compare import check_variants, config_from_settings, unique_slugs
from .frontier_points import fired, points_for, significance_of, stand_in
from .frontier_report import REFERENCE, write_frontier
from .matched_budget import built, is_adaptive, same_order_label, same_order_slug, same_order_variant
from .progress import Progress
from .seed_grid import check_seeds, synced_steps
from .shard import Shard, finish, job_held
from .variants import Variant, entry_of, parse_entry, parse_strategies, registered

#: the budget levels of the verdict table: shares of plain BSP's bytes
DEFAULT_LEVELS = (0.02, 0.1, 0.3, 1.0)
#: the task's settings a cell sets itself (task.json leaves them to the command line)
PER_CELL = ("strategy", "strategy_options", "seed")


@dataclasses.dataclass
class FrontierPlan:
    """The points to run: every method's variants in order (the reference first), the
    registered methods left out because they declare no budget grid, and the declared points
    left out because they cannot run on this task ("entry (why)")."""

    methods: dict[str, list[Variant]]
    left_out: list[str]
    given: list[str] = dataclasses.field(default_factory=list)   # methods whose points --grid gave
    unfit: list[str] = dataclasses.field(default_factory=list)
    same_order: bool = True   # each adaptive point followed by its same-order baseline (off: jobs before it)

    @property
    def variants(self) -> list[Variant]:
        return [v for points in self.methods.values() for v in points]


def declared_points(name: str) -> list[Variant] | None:
    """Method `name`'s declared grid as variants, or None when it declares none."""
    budget = traits_of(registered()[name]).budget
    if budget is None:
        return None
    return [parse_entry(entry_of(name, point)) for point in budget.grid]


def plan_frontier(base: TrainConfig, methods: str | list[str] | None, grid: str | None, seeds: int) -> FrontierPlan:
    """The methods (all registered ones with a budget grid when None) and their points
    (`grid`: `--strategies`-style entries replacing the declared points of the methods they
    name), every variant checked before anything trains."""
    check_seeds(base.optim, seeds)
    names = list(registered()) if methods is None else split_methods(methods)
    given: dict[str, list[Variant]] = {}
    for v in parse_strategies(grid) if grid else []:
        if v.name not in names:
            raise OptionError(f"--grid entry {v.entry!r} names method {v.name!r}, which is not among the "
                              f"methods ({', '.join(names)}); add it to --methods")
        given.setdefault(v.name, []).append(v)
    points: dict[str, list[Variant]] = {}
    left_out, unfit = [], []
    for name in names:
        found = given.get(name) or declared_points(name)
        if found is None:
            if methods is not None:
                raise OptionError(f"method {name!r} declares no budget grid (method_traits(budget=...)); give its points with "
                                  f"--grid {name}:KEY=VALUE,...")
            left_out.append(name)
            continue
        if name not in given and name != REFERENCE:
            found = _fitting(base, found, unfit)
        if found:
            points[name] = found
    reference = points.setdefault(REFERENCE, [])
    if not any(not v.options for v in reference):
        reference.insert(0, parse_entry(REFERENCE))
    points = {REFERENCE: points.pop(REFERENCE), **points}
    variants = [v for vs in points.values() for v in vs]
    for v in variants:
        if fired(v):
            significance_of(base, v)
    check_variants(base, [stand_in(v) for v in variants])
    return FrontierPlan(points, left_out, sorted(given), unfit)


def _fitting(base: TrainConfig, declared: list[Variant], unfit: list[str]) -> list[Variant]:
    """The declared points that can run on `base`'s task; the others are appended to `unfit`
    with the reason (a grid declared for 8 replicas, e.g. groups of 4, on the paper task's
    10): a declared point is a suggestion, so one that does not fit is named, not fatal.
    Each is checked on the task without the user's global strategy options, which the
    plan's full check (`check_variants`) judges; points given with --grid are the user's and
    stay errors."""
    from ..training.config import check_config
    from ..training.plan import strategy_of

    task = dataclasses.replace(base, strategy_options={})
    kept = []
    for v in declared:
        try:
            check_config(row_config(task, stand_in(v)))
            strategy_of(row_config(task, stand_in(v)))
        except (ConfigError, OptionError, ValueError) as err:
            unfit.append(f"{v.entry} ({err})")
            continue
        kept.append(v)
    return kept


def split_methods(text: str | list[str]) -> list[str]:
    names = [n.strip() for n in (text.split(",") if isinstance(text, str) else text)]
    if not names or not all(names):
        raise OptionError(f"--methods {text!r} has an empty name; give registered strategies, e.g. bsp,localsgd")
    unknown = [n for n in names if n not in registered()]
    if unknown:
        raise OptionError(f"--methods: unknown strategy {unknown[0]!r}; choose from {', '.join(registered())}")
    if len(set(names)) < len(names):
        raise OptionError(f"--methods {text!r} names a method twice; name each once")
    return names


def check_levels(levels) -> tuple[float, ...]:
    """Budget levels: shares of BSP's bytes in (0, 1], each once, in increasing order."""
    out = tuple(float(x) for x in levels)
    if not out or any(not 0 < x <= 1 for x in out) or len(set(out)) < len(out):
        raise ConfigError(f"budget levels must be distinct shares of BSP's bytes in (0, 1], got {list(levels)}")
    return tuple(sorted(out))


def job_settings(base: TrainConfig, plan: FrontierPlan, seeds: int, levels) -> dict:
    return {"base": job.settings_of(base), "points": [[m, [v.entry for v in vs]] for m, vs in plan.methods.items()],
            "left_out": plan.left_out, "given": plan.given, "seeds": seeds, "levels": list(levels),
            **({"unfit": plan.unfit} if plan.unfit else {}),   # absent when empty: older jobs resume
            **({"same_order": True} if plan.same_order else {})}


def held(out: Path) -> list[str]:
    """What of a frontier `out` holds: its files and runs (relative paths)."""
    files = [out / n for n in (FRONTIER_FILE, FRONTIER_TABLE, TASK_FILE, DERIVED_FILE)]
    return [str(p.relative_to(out)) for p in [*files, *sorted(out.glob(f"*/seed*/{METRICS_FILE}"))] if p.is_file()]


def check_fresh(out: Path, resume: bool = False) -> None:
    job.check_start(out, "frontier", resume=resume, held=held(out))


def task_file(base: TrainConfig) -> dict:
    """The task as `jaxsel compare --config` reads it (a cell sets its strategy and seed)."""
    return {k: v for k, v in job.settings_of(base).items() if k not in PER_CELL}


@one_job()   # each cell's strategy and layout built once (training/job_builds.py)
def run_frontier(base: TrainConfig, plan: FrontierPlan, out_dir: str | Path, *, seeds: int = 3,
                 levels=DEFAULT_LEVELS, resume: bool = False, announce=None, on_start=None,
                 shard: Shard | None = None, batch_cells: bool = True) -> dict | None:
    """Run (or, `resume`, finish) the frontier of `plan` in `out_dir`; returns frontier.json
    (None when `shard`, one shard of the job's cells, ends with other shards' cells missing;
    `batch_cells`: a point's seeds train as one batch, else one by one)."""
    levels = check_levels(levels)
    out = Path(out_dir)
    base = dataclasses.replace(base, run_group=base.evaluation.run_group or out.name)

    def begin(joining: bool):
        job.begin(out, "frontier", job_settings(base, plan, seeds, levels), resume=resume or joining,
                  held=held(out))
        write_job_file(out, TASK, task_file(base))

    with job_held(out, "frontier directory", shard, begin):
        if on_start is not None:
            on_start()
        progress = Progress(planned_cells(base, plan, seeds), announce)
        with job_queue(base, batch_cells, progress) as batches:   # the next batch compiles while one steps (batch_queue.py)
            cells = Cells(out, progress, tolerate_faults=True, shard=shard, batch_cells=batch_cells, queue=batches)
            points = run_points(base, plan, seeds, out, cells)
            missing = []
            for point in points:
                point.runs, left = cells.settle(point.runs)
                missing += left
            result = finish(out, "frontier directory", shard, missing,
                            lambda: write_frontier(out, base, plan, points, seeds, levels))
        if announce is not None:
            announce(progress.summary())
    return result


def report_frontier(out: Path) -> dict:
    """frontier.json, frontier.md and frontier.png of the finished frontier in `out`, made
    again from its records alone (nothing trains)."""
    recorded = job.read_job(out)
    settings = recorded["settings"]
    base = config_from_settings(settings["base"])
    plan = FrontierPlan({m: [parse_entry(e) for e in entries] for m, entries in settings["points"]},
                        settings["left_out"], settings["given"], settings.get("unfit", []),
                        settings.get("same_order", False))
    progress = Progress(planned_cells(base, plan, settings["seeds"]))
    cells = run_points(base, plan, settings["seeds"], out, Cells(out, progress, load_only=True,
                                                                 code=recorded["code"]))
    return write_frontier(out, base, plan, cells, settings["seeds"], settings["levels"])


@dataclasses.dataclass
class Point:
    """One configuration of one method over the seeds: its runs (or failures)."""

    method: str
    variant: Variant
    slug: str
    runs: list   # RunResult or FailedCell, seed order
    label: str | None = None     # a same-order baseline's row name (else the variant's)
    matches: str | None = None   # a same-order baseline's adaptive point (its entry)

    @property
    def failed(self) -> list[FailedCell]:
        return [r for r in self.runs if isinstance(r, FailedCell)]


def run_points(base: TrainConfig, plan: FrontierPlan, seeds: int, out: Path, cells: Cells) -> list[Point]:
    """Every point's cells, method by method (plain BSP first), each point over the seeds; a
    derived point (`frontier_points`) runs as derived from plain BSP's runs, and one that
    trains another point's configuration is not run again. A method's points are asked for
    together (its cells that share a program train as one batch, `Cells.get_all`), then the
    same-order baselines of its adaptive points (`plan.same_order`), together too."""
    slugs = unique_slugs(plan.variants)
    planned = [(method, v) for method, vs in plan.methods.items() for v in vs]
    numbered = [(i, method, v, slug) for i, ((method, v), slug) in enumerate(zip(planned, slugs), 1)]
    points: list[Point] = []
    derived = None
    for name in plan.methods:
        todo: list[tuple[str, Variant, str, bool]] = []   # (where, variant, slug, gets a baseline)
        for i, method, variant, slug in numbered:
            if method != name:
                continue
            where = f"[point {i} of {len(planned)}]"
            baselined = plan.same_order and gets_baseline(base, variant)
            if fired(variant):
                if derived is None:
                    derived = points_for(out, base, plan.variants, _plain(points, cells), base.optim.steps)
                if derived[variant.entry]["same_as"] is not None:
                    cells.progress.skip(seeds * (1 + baselined))
                    continue
                variant = parse_entry(derived[variant.entry]["entry"])
            todo.append((where, variant, slug, baselined))
        runs = points_runs(base, [(where, v, slug) for where, v, slug, _ in todo], seeds, out, cells)
        mine = [Point(name, v, slug, r) for (_, v, slug, _), r in zip(todo, runs)]
        points.extend(mine)
        points.extend(same_order_points(base, [(p, where) for p, (where, *_, b) in zip(mine, todo) if b],
                                        seeds, out, cells, points))
    return points


def points_runs(base: TrainConfig, wanted: list[tuple[str, Variant, str]], seeds: int, out: Path,
                cells: Cells) -> list[list]:
    """Each point's cells (`wanted`: where progress places it, its variant, its slug), seed by
    seed, in `out`/`slug`/seed<s>: asked for in one `get_all`."""
    cfgs = [(row_config(base, variant, str(out / slug / f"seed{s}"), s), f"{where} {variant.entry}, seed {s}",
             f"{where} {variant.entry}")
            for where, variant, slug in wanted for s in range(base.optim.seed, base.optim.seed + seeds)]
    found = cells.get_all([(cfg, what) for cfg, what, _ in cfgs], row=[row for *_, row in cfgs])
    return [found[k * seeds:(k + 1) * seeds] for k in range(len(wanted))]


def gets_baseline(base: TrainConfig, variant: Variant) -> bool:
    """Whether the point is adaptive and trigger-based: one whose trigger a spread schedule
    of as many syncs can replace (`same_order_variant`)."""
    from ..strategies.triggered import Triggered

    strategy = built(base, stand_in(variant))
    return is_adaptive(strategy) and isinstance(strategy, Triggered)


def planned_cells(base: TrainConfig, plan: FrontierPlan, seeds: int) -> int:
    """The job's cells: every point's, and its same-order baseline's where it gets one."""
    baselines = sum(gets_baseline(base, v) for v in plan.variants) if plan.same_order else 0
    return (len(plan.variants) + baselines) * seeds


def same_order_points(base: TrainConfig, adaptive: list[tuple[Point, str]], seeds: int, out: Path, cells: Cells,
                      points: list[Point]) -> list[Point]:
    """The adaptive points' same-order baselines (`adaptive`: each point and where progress
    placed it), on the same seeds: each its method with only the trigger replaced by a
    spread schedule of its mean sync count over seeds, rounded (`same_order_variant`, as
    `jaxsel compare` builds it). No baseline for a point where a seed failed (no count to
    match) or where another point already trains that configuration."""
    wanted: list[tuple[str, Variant, str]] = []
    labels: list[tuple[Point, Variant]] = []
    for point, where in adaptive:
        point.runs = cells.need(point.runs)
        variant = None if point.failed else same_order_variant(
            base, point.variant, sum(synced_steps(r) for r in point.runs) / len(point.runs), base.optim.steps)
        taken = [p.variant.entry for p in points] + [v.entry for _, v, _ in wanted]
        if variant is None or variant.entry in taken:
            cells.progress.skip(seeds)
            continue
        wanted.append((f"{where} same-order baseline:", variant, same_order_slug(variant.options["trigger.syncs"],
                                                                                  point.slug)))
        labels.append((point, variant))
    runs = points_runs(base, wanted, seeds, out, cells)
    return [Point(variant.name, variant, slug, r, same_order_label(variant, base.optim.steps, point.variant.entry),
                  point.variant.entry) for (point, variant), (_, _, slug), r in zip(labels, wanted, runs)]


def _plain(points: list[Point], cells: Cells) -> list | None:
    """Plain BSP's runs among the points so far (None when it failed or has not run), those
    of other shards waited for."""
    plain = next((p for p in points if p.method == REFERENCE and not p.variant.options), None)
    if plain is not None:
        plain.runs = cells.need(plain.runs)
    return None if plain is None or plain.failed else plain.runs
