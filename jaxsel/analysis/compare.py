"""`jaxsel compare`: train strategies (and variants of one) side by side, over seeds.

Each `--strategies` entry (`variants.py`: `selsync`, `selsync:delta=0.05`) is a row,
trained once per seed into OUT/<row>/seed<S>/ (metrics.jsonl, evals.json, final.json):
each run is a cell of the job (`cells.py`). With `match_budget`, every row whose sync
pattern is adaptive gets local SGD on exactly as many steps (`matched_budget.py`), and one
sentence says whether it beat that baseline beyond the seed spread. Writes results.json
(one row per variant: means over seeds, the accuracy's std, time-to-accuracy of the
seed-mean curve, every seed's figures) and five pictures: comparison.png,
accuracy_vs_time.png, sync_timeline.png, divergence.png (seed means with their spread) and
pareto.png (accuracy against MB sent and against projected time to target).

The comparison directory is locked as a whole while it runs (training/rundir/lock.py). job.json
records the job (`job.py`); one that already holds a comparison is refused rather than
overwritten, unless `resume`: then the finished cells are loaded from their records, the
rest run, and the results are made from all of them, as an uninterrupted comparison's
are. A directory holding a `jaxsel train` run is always refused. `report_comparison` makes
results.json and the pictures again from the records.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from ..training.config import TrainConfig
from ..training.job_builds import one_job
from ..training.run_kinds import refuse_run
from ..training.rundir import RESULTS_FILE, run_metrics_below
from ..training.rundir.write import write_record
from ..training.runlog import projected_cluster
from ..training.sync_horizon import late_note
from . import job
from .attribution import attribute
from .batch_queue import job_queue
from .cells import Cells, PendingCell, row_config
from .compare_table import format_table  # noqa: F401  (the table is part of this module's API)
from .matched_budget import (baseline_trigger, built, is_adaptive, matched_label, matched_slug, matched_variant,
                             order_facts, same_order_label, same_order_slug, same_order_variant)
from .pareto import plot_pareto
from .plots import plot_accuracy_vs_time, plot_comparison, plot_divergence, plot_sync_timeline, setting
from .progress import Progress
from .seed_grid import RowRuns, check_seeds, mean_std, mean_syncs, row_result
from .shard import Shard, finish, job_held
from .significance_reach import after_warmup, quiet_note, significance_options, warmup_note
from .time_spread import add_time_columns
from .time_to_accuracy import DEFAULT_TARGET, Target, resolve_target
from .variants import Variant, check_globals_reach, parse_strategies

PICTURES = ("comparison.png", "accuracy_vs_time.png", "sync_timeline.png", "divergence.png", "pareto.png")


@dataclasses.dataclass
class Comparison:
    rows: list[dict]           # results.json
    row_runs: list[RowRuns]    # the runs behind each row


def compare(base: TrainConfig, strategies: str | list[str], out_dir: str | Path, target: str = DEFAULT_TARGET,
            *, seeds: int = 1, match_budget: bool = False, resume: bool = False) -> list[dict]:
    """Run every entry of `strategies` (a `--strategies` text or a list of entries) with
    `base`'s settings for seeds base.seed .. base.seed + seeds - 1; return the rows
    written to results.json (`resume`: continue the comparison stopped in `out_dir`)."""
    return run_comparison(base, strategies, out_dir, target, seeds=seeds, match_budget=match_budget,
                          resume=resume).rows


@one_job()   # each cell's strategy and layout built once (training/job_builds.py)
def run_comparison(base: TrainConfig, strategies: str | list[str], out_dir: str | Path,
                   target: str = DEFAULT_TARGET, *, seeds: int = 1, match_budget: bool = False,
                   keep_states: bool = False, on_start=None, announce=None, plan=None,
                   resume: bool = False, shard: Shard | None = None, batch_cells: bool = True) -> Comparison | None:
    """`compare`, returning the runs too (`keep_states`: with the final TrainState of each
    run trained now, one per run in memory). `on_start()` is called once the directory is
    locked and its job begun, `announce(text)` with a line of progress before each cell.
    `plan`: `plan_rows`'s answer when the caller checked it already (each variant's config
    is checked once). `resume`: `out_dir` holds this very comparison, stopped; its finished
    cells are loaded, not run again. `shard`: run that shard of the cells only (`shard.py`);
    None when other shards' cells are still missing at its end. `batch_cells`: a row's
    seeds train as one batch (`Cells.get_all`), else one by one."""
    plan = plan if plan is not None else plan_rows(base, strategies, seeds, match_budget)
    out = Path(out_dir)
    base = dataclasses.replace(base, run_group=base.evaluation.run_group or out.name)   # one dashboard group

    def begin(joining: bool):
        refuse_run(out)   # a `jaxsel train` run's directory (training/run_kinds.py)
        job.begin(out, "compare", job_settings(base, plan, seeds, match_budget, target), resume=resume or joining,
                  held=held_runs(out))

    with job_held(out, "compare directory", shard, begin):
        if on_start is not None:
            on_start()
        progress = Progress(planned_cells(plan, seeds), announce)
        with job_queue(base, batch_cells, progress) as batches:   # the next batch compiles while one steps (batch_queue.py)
            cells = Cells(out, progress, keep_states=keep_states, shard=shard, late_warnings=False,   # noted in the table
                          batch_cells=batch_cells, queue=batches)
            row_runs = run_rows(base, plan, seeds, out, cells)
            done = finish(out, "compare directory", shard, settle_rows(base, row_runs, cells),
                          lambda: write_results(row_runs, base, target, out))
        if announce is not None:
            announce(progress.summary())
    return done


def write_results(row_runs: list[RowRuns], base: TrainConfig, target: str, out: Path) -> Comparison:
    """results.json and the pictures of the finished rows."""
    rows = results(row_runs, base, target)
    write_record(out / RESULTS_FILE, rows)
    write_pictures(row_runs, rows, out)
    return Comparison(rows, row_runs)


def report_comparison(out: Path) -> Comparison:
    """results.json and the pictures of the finished comparison in `out`, made again from
    its records alone (nothing trains); a cell that has not finished is a ConfigError."""
    recorded = job.read_job(out)
    settings = recorded["settings"]
    base = config_from_settings(settings["base"])
    plan = plan_rows(base, settings["strategies"], settings["seeds"], settings["match_budget"])
    progress = Progress(planned_cells(plan, settings["seeds"]))
    cells = Cells(out, progress, load_only=True, code=recorded["code"])
    row_runs = run_rows(base, plan, settings["seeds"], out, cells)
    settle_rows(base, row_runs, cells)
    return write_results(row_runs, base, settings["target"], out)


def config_from_settings(settings: dict) -> TrainConfig:
    """A job's recorded task as a TrainConfig (the fields it does not record at their defaults)."""
    return TrainConfig(**settings)


def job_settings(base: TrainConfig, plan, seeds: int, match_budget: bool, target: str) -> dict:
    """What a resumed comparison must share with the stopped one (job.json)."""
    return {"base": job.settings_of(base), "strategies": [v.entry for v, _ in plan], "seeds": seeds,
            "match_budget": match_budget, "target": target}


def planned_cells(plan, seeds: int) -> int:
    """Runs a comparison plans: every row's and its two matched rows' seeds (a matched row
    that reuses another's runs, or a same-order one a composition has none of, is taken off
    as it turns out)."""
    return seeds * (len(plan) + 2 * sum(bool(m) for _, m in plan))


def check_variants(base, variants: list[Variant]) -> list:
    """Before anything trains: every entry's config passes `check_config` (once per
    variant) and its strategy builds with its options (a bad key or value names the entry),
    every global option reaches a row, and no two entries train the same configuration.
    Returns the strategies as built."""
    from ..core.options import OptionError
    from ..training.config import check_config
    from ..training.plan import strategy_of

    check_globals_reach(variants, base.method.strategy_options)
    seen: list[tuple[Variant, Any]] = []
    for v in variants:
        check_config(row_config(base, v))
        try:
            strategy = strategy_of(row_config(base, v))
        except ValueError as err:
            raise OptionError(f"--strategies entry {v.entry!r}: {err}") from None
        for other, same in seen:
            if same == strategy:
                what = (f"lists {v.entry!r} twice" if other.entry == v.entry else
                        f"entries {other.entry!r} and {v.entry!r} train the same configuration "
                        f"({strategy.describe()})")
                raise OptionError(f"--strategies {what}; drop one")
        seen.append((v, strategy))
    return [s for _, s in seen]


def plan_rows(base: TrainConfig, strategies, seeds: int, match_budget: bool) -> list[tuple[Variant, bool]]:
    """Every entry checked before anything trains: (variant, gets a matched row)."""
    check_seeds(base.optim, seeds)
    variants = parse_strategies(strategies)
    built = check_variants(base, variants)
    return [(v, match_budget and is_adaptive(s)) for v, s in zip(variants, built)]


def held_runs(out: Path) -> list[str]:
    """What of a comparison `out` holds: its results and runs (relative paths)."""
    return [str(p.relative_to(out)) for p in [out / RESULTS_FILE, *run_metrics_below(out)] if p.is_file()]


def check_fresh(out: Path, resume: bool = False) -> None:
    """A comparison never overwrites another's results (or runs) in its directory; one to
    resume must be there (its settings are compared once the directory is locked)."""
    job.check_start(out, "compare", resume=resume, held=held_runs(out))


def check_data(base: TrainConfig) -> None:
    """The comparison's dataset is prepared (else DatasetNotPrepared, naming the command that
    prepares it): checked before its directory is created or anything printed."""
    from ..data.sources import check_prepared

    check_prepared(base.data.dataset, base.data.data_dir)


def summary_line(base: TrainConfig, seeds: int, layout: str, seconds: float) -> str:
    """The line `jaxsel compare` closes with above its table: the task (by name where the
    settings are one), seeds, global strategy options, layout and how long it took."""
    from ..training.tasks import task_of

    data, optim = base.data, base.optim
    first = optim.seed
    over = f"seeds {first}-{first + seeds - 1}" if seeds > 1 else f"seed {first}"
    options = ", ".join(f"{k}={v}" for k, v in base.method.strategy_options.items())
    named = task_of(base)
    return (f"{f'task {named}: ' if named else ''}{data.dataset} / {optim.model}: {base.placement.replicas} replicas x "
            f"batch {optim.batch_size}, {optim.steps} steps, partition {data.partition}, lr {optim.lr:g} "
            f"({optim.lr_schedule}), {over}"
            f"{f'; strategy options for every row that takes them: {options}' if options else ''}; "
            f"{layout}; took {seconds:.0f} s")


def run_rows(base, plan, seeds: int, out: Path, cells: Cells) -> list[RowRuns]:
    """Each row over the seeds; an adaptive row's matched baseline right after it. A
    matched row with the configuration of a row already trained (two adaptive rows with
    as many syncs, or an explicit local SGD row) shares that row's runs: the same
    configuration and seeds give the same runs, bit for bit."""
    seed_list = list(range(base.optim.seed, base.optim.seed + seeds))
    trained: dict[str, RowRuns] = {}

    def train_row(variant, slug, where: str, optional: bool = False):
        """The row's runs, trained or loaded (None: an `optional` row a report finds unrecorded)."""
        key = json.dumps([variant.name, variant.effective(base.method.strategy_options)], sort_keys=True, default=str)
        if optional and cells.load_only and key not in trained and not (out / slug).exists():
            return None
        if key in trained:
            cells.progress.say(f"{where} {variant.entry}: trained above (in {trained[key].slug}/), its runs are reused")
            cells.progress.skip(seeds)
            return RowRuns(variant, trained[key].slug, trained[key].runs)
        runs = cells.get_all([(row_config(base, variant, str(out / slug / f"seed{s}"), s),
                               f"{where} {variant.entry}, seed {s} ({i} of {seeds})")
                              for i, s in enumerate(seed_list, 1)], row=f"{where} {variant.entry}")
        trained[key] = RowRuns(variant, slug, runs)
        return trained[key]

    rows: list[RowRuns] = []
    for i, ((variant, match), slug) in enumerate(zip(plan, unique_slugs([v for v, _ in plan])), 1):
        row = train_row(variant, slug, f"[entry {i} of {len(plan)}]")
        if not isinstance(row.runs[0], PendingCell):   # else once it is in (`settle_rows`)
            label(base, row)
        rows.append(row)
        if match:
            if any(isinstance(r, PendingCell) for r in row.runs):   # another shard's, not in yet
                row.runs = cells.need(row.runs)   # its baselines are planned from its syncs
            rows += matched_rows(base, row, slug, train_row, f"[entry {i} of {len(plan)}",
                                 skip=lambda: cells.progress.skip(seeds))
    return rows


def settle_rows(base, rows: list[RowRuns], cells: Cells) -> list:
    """Each row's runs with the other shards' cells that are in since loaded, and its label
    (from its first run) once they are all in; returns the cells still missing."""
    missing = []
    for row in rows:
        if any(isinstance(r, PendingCell) for r in row.runs):
            row.runs, left = cells.settle(row.runs)
            missing += left
    for row in rows if not missing else ():
        if row.matched_to is None and not row.label:
            label(base, row)
    return missing


def label(base, row: RowRuns) -> None:
    """A row's label, from how its first run built the strategy."""
    facts = order_facts(built(base, row.variant))   # as the plan built it for the job (job_builds.py)
    row.label = row.variant.label(row.runs[0].final["strategy"], facts.get("sync_order", ""))


def matched_rows(base, row: RowRuns, slug: str, train_row, where: str, skip) -> list[RowRuns]:
    """An adaptive row's budget-matched baselines: the same method with only its trigger
    replaced by a schedule of as many syncs (where it is trigger-based; else `skip()` its
    planned cells), then local SGD on as many syncs, averaging after the update
    (`matched_budget.py`). A report of a comparison recorded before the same-order baseline
    existed (issue 58) goes without it (`train_row(..., optional=True)` is None)."""
    out = []
    same = same_order_variant(base, row.variant, mean_syncs(row), base.optim.steps)
    if same is None:
        skip()
    else:
        syncs = same.options["trigger.syncs"]
        runs = train_row(same, same_order_slug(syncs, slug), f"{where}, same-order matched baseline]", optional=True)
        if runs is None:
            skip()
        else:
            out.append(dataclasses.replace(runs, label=same_order_label(same, base.optim.steps, row.variant.entry),
                                           matched_to=row))
    twin = matched_variant(row.variant, mean_syncs(row))
    syncs = twin.options["syncs"]
    runs = train_row(twin, matched_slug(syncs, slug), f"{where}, matched baseline]")
    out.append(dataclasses.replace(runs, label=matched_label(syncs, base.optim.steps, row.variant.entry),
                                   matched_to=row))
    return out


def unique_slugs(variants: list[Variant]) -> list[str]:
    """Each row's directory name, made unique where two entries' names clean up alike."""
    out: list[str] = []
    for v in variants:
        slug, n = v.slug(), 2
        while slug in out:
            slug, n = f"{v.slug()}-{n}", n + 1
        out.append(slug)
    return out


def results(row_runs: list[RowRuns], base: TrainConfig, target: str) -> list[dict]:
    """results.json's rows: the target from the seed means, speedups against the plain BSP row."""
    goal = resolve_target(target, {r.variant.entry: mean_std([x.final["final_test_accuracy"] for x in r.runs])[0]
                                   for r in row_runs})
    rows = [row_result(r, goal, network_label(base)) for r in row_runs]
    add_time_columns(row_runs, rows, base.projection)   # the cost model's time and speed-up; the measured one with its spread
    for run, row in zip(row_runs, rows):
        row.update(significance_row(run, row))
        if not row.get("quiet_note"):   # the significance rows' own note says it already, with why
            row["late_note"] = late_note(run.label, built(base, run.variant),
                                         {x.config.optim.seed: x.records for x in run.runs}, base.optim.steps)
        row.update(order_row(base, run))
    attribute(base, row_runs, rows)
    return rows


def order_row(base: TrainConfig, row: RowRuns) -> dict:
    """Which order the row's syncs ran in; for a budget-matched row, its schedule and
    which baseline it is (the same method, or local SGD averaging after the update)."""
    strategy = built(base, row.variant)
    facts = order_facts(strategy)
    if row.matched_to is not None:
        facts.update(baseline_trigger=baseline_trigger(strategy),
                     baseline="local SGD" if row.variant.name == "localsgd" else "same order")
    return facts


def network_label(cfg: TrainConfig) -> str:
    """What the projection ran on, for tables and plots: the --project-network as given,
    or both networks of a two-level cluster."""
    cluster = projected_cluster(cfg.projection)
    return cluster.label(cfg.placement.replicas) if cluster.two_level else cfg.projection.project_network


def significance_row(row: RowRuns, result: dict) -> dict:
    """For a significance-triggered row: its forced warm-up syncs and its syncs after the
    warm-up (means over seeds, each seed's in `per_seed`), the peak Delta_bar over seeds,
    how many of its syncs were warm-up (`warmup_note`) and why it stayed quiet
    (`quiet_note`) when no seed synchronized after the warm-up."""
    if not any("delta" in r for r in row.runs[0].records):
        return {}
    opts = significance_options(row.runs[0])
    stats = [after_warmup(run.records, opts.warmup_steps) for run in row.runs]
    for seed, s in zip(result["per_seed"], stats):
        seed["warmup_syncs"] = s["warmup_syncs"]
        seed["syncs_after_warmup"] = s["syncs_after_warmup"]
    peaks = [s["max_delta_bar_after_warmup"] for s in stats if s["max_delta_bar_after_warmup"] is not None]
    agg = {"statistic": opts.statistic, "warmup_steps": stats[0]["warmup_steps"],
           "warmup_syncs": mean_std([s["warmup_syncs"] for s in stats])[0],
           "syncs_after_warmup": mean_std([s["syncs_after_warmup"] for s in stats])[0],
           "max_delta_bar_after_warmup": max(peaks) if peaks else None}
    syncs = agg["warmup_syncs"] + agg["syncs_after_warmup"]
    return {**agg, "warmup_note": warmup_note(row.label, agg, syncs), "quiet_note": quiet_note(row.label, agg, opts)}


def write_pictures(row_runs: list[RowRuns], rows: list[dict], out: Path) -> None:
    goal = Target(rows[0]["target_accuracy"], rows[0]["target"])
    plot_comparison(row_runs, out / "comparison.png")
    plot_accuracy_vs_time(row_runs, goal, rows[0]["project_network"], out / "accuracy_vs_time.png")
    plot_sync_timeline(row_runs, out / "sync_timeline.png")
    plot_divergence(row_runs, out / "divergence.png")
    plot_pareto(rows, setting(row_runs[0]), out / "pareto.png")
