"""`jaxsel frontier`: every method swept over its budget knob, on one task and partition,
with seeds; which method gives the best model at each budget (analysis/frontier.py).

The command takes `jaxsel compare`'s task (its default task, evaluated every 100 steps:
the frontier reads final accuracies), its task and strategy sections and job flags, and
its own: the methods, the points that replace a method's declared grid and the budget
levels of the verdict table.
"""
from __future__ import annotations

import time
from pathlib import Path

from ..training.job_builds import one_job
from .common import HelpFormatter, default_out, ensure_writable, job_layout_line, overrides_note, start_job_jax, user_input
from .compare import DEFAULT_TASK, DEFAULT_TASK_NOTE
from .job_args import Job, add_job_args, check_resume, shard_of
from .strategy_args import add_strategy_args
from .settings_args import config_from_args
from .task_args import add_task_args
from .task_flag import add_task_flag, task_line

#: analysis/frontier.py's DEFAULT_LEVELS as --help shows them (that module imports JAX; a test keeps them equal)
LEVELS_SHOWN = "0.02,0.1,0.3,1"
JOB = Job("frontier directory", "runs/frontier-<time>",
          "the frontier stopped there (same settings): finished cells are loaded, the rest run",
          "TrainConfig's settings, methods, ...", seeds=True, shards=True)


def frontier_task(default_task: dict) -> dict:
    """The frontier's task: compare's default task, evaluated every 100 steps (the same runs)."""
    return {**default_task, "eval_every": 100}


def add_parser(sub) -> None:
    task = frontier_task(DEFAULT_TASK)
    p = sub.add_parser("frontier", usage="%(prog)s [OPTIONS]",
                       help="every method swept over its budget knob: which wins at each budget",
                       description=f"Every method over its declared budget grid, with seeds. The default task: "
                                   f"{DEFAULT_TASK_NOTE} {overrides_note('frontier', task)} "
                                   f"Writes frontier.json, frontier.md and frontier.png.",
                       formatter_class=HelpFormatter)
    job = p.add_argument_group("the frontier: its directory, seeds and budget levels")
    add_job_args(job, JOB)
    job.add_argument("--levels", default=None, metavar="SHARES",
                     help=f"budget levels of the verdict table: shares of plain BSP's bytes, in (0, 1] "
                          f"(default {LEVELS_SHOWN})")
    groups = add_task_args(p, "frontier", task)
    add_task_flag(groups["data"])
    s = groups["strategy"]
    s.add_argument("--methods", default=None, metavar="NAMES",
                   help="comma-separated strategies (default: every one that declares a budget grid); plain bsp "
                        "always runs: the levels are shares of its bytes")
    s.add_argument("--grid", default=None, metavar="ENTRIES",
                   help="points that replace the grid of the methods they name, as compare's entries "
                        "(e.g. localsgd:period=4,localsgd:period=16)")
    add_strategy_args(s)
    p.set_defaults(func=cmd_frontier)


def parse_levels(text: str | None) -> tuple[float, ...]:
    from ..analysis.frontier import DEFAULT_LEVELS, check_levels

    if text is None:
        return DEFAULT_LEVELS
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(f"--levels {text!r} must be comma-separated shares of BSP's bytes, e.g. 0.02,0.1,0.3,1") \
            from None
    return check_levels(values)


@one_job()   # each cell's strategy and layout built once, from its checks to its tables
def cmd_frontier(args) -> int:
    from ..analysis.job import kept_compilations

    start_job_jax(args)
    check_resume(args, JOB)
    with user_input():
        args.shard = shard_of(args, JOB)
    out = args.out or default_out("frontier")
    with kept_compilations(out, args.shard):   # before anything compiles
        return _frontier(args, out)


def _frontier(args, out: str) -> int:
    from ..analysis.frontier import check_fresh, plan_frontier, planned_cells, run_frontier
    from ..analysis.frontier_report import format_verdict
    from ..analysis.job_layout import job_layout
    from ..analysis.shard import joins
    from ..data.paths import undo_created

    with user_input():
        levels = parse_levels(args.levels)
        given = config_from_args(args, strategy="bsp")   # each point sets its strategy
        base = job_layout(given, args.batch_cells)   # analysis/job_layout.py
        plan = plan_frontier(base, args.methods, args.grid, args.seeds)   # every point, before anything trains
        layout = job_layout_line(base, given, args.batch_cells)
        check_fresh(Path(out), args.resume or joins(Path(out), args.shard))
    top = ensure_writable(out)
    cells = planned_cells(base, plan, args.seeds)
    baselines = cells // args.seeds - len(plan.variants)   # each adaptive point's same-order baseline

    def start():
        args.run_dir = out   # a stop from here on names it in the command that continues
        print(f"run directory: {out}", flush=True)
        print(task_line(base, args), flush=True)
        print(f"layout: {layout}", flush=True)
        if args.shard is not None:
            print(args.shard.describe(), flush=True)
        print(f"{len(plan.variants)} points of {len(plan.methods)} methods"
              + (f" + {baselines} same-order baselines (at most)" if baselines else "")
              + f" x {args.seeds} seeds = {cells} cells"
              + (f"; left out (no budget grid declared): {', '.join(plan.left_out)}" if plan.left_out else "")
              + (f"; declared points left out (they do not fit this task): {'; '.join(plan.unfit)}"
                 if plan.unfit else ""),
              flush=True)

    started = time.perf_counter()
    with undo_created(top or out, top is not None):
        result = run_frontier(base, plan, out, seeds=args.seeds, levels=levels, resume=args.resume,
                              announce=lambda text: print(text, flush=True), on_start=start, shard=args.shard,
                              batch_cells=args.batch_cells)
    if result is None:   # a shard that ended before the others (it said so)
        return 0
    print(f"\n{result['setting']}; {layout}; took {time.perf_counter() - started:.0f} s")
    print(format_verdict(result))
    print(f"\nwrote {out}/frontier.json, frontier.md and frontier.png")
    return 0
