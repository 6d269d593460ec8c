"""`jaxsel frontier`: every method swept over its budget knob, on one task and partition,
with seeds; which method gives the best model at each budget (analysis/frontier.py).

The command takes `jaxsel compare`'s task flags (its default task, evaluated every 100
steps: the frontier reads final accuracies) and strategy flags, and its own: the methods,
the points that replace a method's declared grid, the seeds, the budget levels of the
verdict table, the directory, and `--resume`.
"""
from __future__ import annotations

import time
from pathlib import Path

#: the frontier's task: compare's default task, evaluated less often (the same runs)
FRONTIER_TASK_NOTE = "evaluated every 100 steps (the frontier reads final accuracies; the runs are the same)"


def frontier_task() -> dict:
    from .command import DEFAULT_TASK

    return {**DEFAULT_TASK, "eval_every": 100}


def add_frontier(sub) -> None:
    from ..analysis.frontier import DEFAULT_LEVELS
    from .command import DEFAULT_TASK_NOTE, _overrides_note, add_training_args
    from .strategy_args import HelpFormatter, add_strategy_args, strategy_epilog

    p = sub.add_parser("frontier", help="every method swept over its budget knob: which wins at each budget",
                       description=f"Every method over its declared budget grid, with seeds. The default task: "
                                   f"{DEFAULT_TASK_NOTE} {_overrides_note('frontier', frontier_task())} "
                                   f"Writes frontier.json, frontier.md and frontier.png.",
                       formatter_class=HelpFormatter, epilog=strategy_epilog())
    add_training_args(p, "frontier", frontier_task())
    p.add_argument("--methods", default=None, metavar="NAMES",
                   help="comma-separated strategies (default: every registered one that declares a budget grid); "
                        "plain bsp always runs: the budget levels are shares of its bytes")
    p.add_argument("--grid", default=None, metavar="ENTRIES",
                   help="points that replace the declared grid of the methods they name, as compare's --strategies "
                        "entries (e.g. localsgd:period=4,localsgd:period=16)")
    p.add_argument("--seeds", type=int, default=3, metavar="K", help="every point with seeds --seed .. --seed+K-1")
    p.add_argument("--levels", default=",".join(f"{x:g}" for x in DEFAULT_LEVELS), metavar="SHARES",
                   help="budget levels of the verdict table: shares of plain BSP's bytes, in (0, 1]")
    p.add_argument("--out", default=None, help="directory (default runs/frontier-<time>)")
    p.add_argument("--resume", dest="resume_job", action="store_true",
                   help="continue the frontier stopped in --out (same settings): finished cells are loaded, the "
                        "rest run")
    p.add_argument("--config", default=None, metavar="FILE",
                   help="settings from a TOML/JSON/YAML file (TrainConfig fields, methods, ...); flags typed "
                        "override it")
    add_strategy_args(p)
    p.set_defaults(func=cmd_frontier)


def parse_levels(text: str) -> tuple[float, ...]:
    from ..analysis.frontier import check_levels

    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(f"--levels {text!r} must be comma-separated shares of BSP's bytes, e.g. 0.02,0.1,0.3,1") \
            from None
    return check_levels(values)


def cmd_frontier(args) -> int:
    from ..analysis.job import kept_compilations
    from .command import UsageError, _default_out, _start_jax

    _start_jax(args.replicas)
    if args.resume_job and not args.out:
        raise UsageError("--resume needs --out DIR: the directory of the frontier to continue")
    out = args.out or _default_out("frontier")
    with kept_compilations(out):   # before anything compiles
        return _frontier(args, out)


def _frontier(args, out: str) -> int:
    from ..analysis.frontier import check_fresh, plan_frontier, run_frontier
    from ..analysis.frontier_report import format_verdict
    from ..data.paths import undo_created
    from .command import _ensure_writable, _layout, config_from_args, user_input

    with user_input():
        levels = parse_levels(args.levels)
        base = config_from_args(args, strategy="bsp")   # each point sets its strategy
        plan = plan_frontier(base, args.methods, args.grid, args.seeds)   # every point, before anything trains
        layout = _layout(base)
        check_fresh(Path(out), args.resume_job)
    created = _ensure_writable(out, default=not args.out)
    cells = len(plan.variants) * args.seeds

    def start():
        print(f"run directory: {out}", flush=True)
        print(f"layout: {layout}", flush=True)
        print(f"{len(plan.variants)} points of {len(plan.methods)} methods x {args.seeds} seeds = {cells} cells"
              + (f"; left out (no budget grid declared): {', '.join(plan.left_out)}" if plan.left_out else ""),
              flush=True)

    started = time.perf_counter()
    with undo_created(out, created):
        result = run_frontier(base, plan, out, seeds=args.seeds, levels=levels, resume=args.resume_job,
                              announce=lambda text: print(text, flush=True), on_start=start)
    print(f"\n{result['setting']}; {layout}; took {time.perf_counter() - started:.0f} s")
    print(format_verdict(result))
    print(f"\nwrote {out}/frontier.json, frontier.md and frontier.png")
    return 0

