"""`jaxsel frontier`: every method swept over its budget knob, on one task and partition,
with seeds; which method gives the best model at each budget (analysis/frontier.py).

The command takes `jaxsel compare`'s task flags (its default task, evaluated every 100
steps: the frontier reads final accuracies) and strategy flags, and its own: the methods,
the points that replace a method's declared grid, the seeds, the budget levels of the
verdict table, the directory, and `--resume`. What it shares with the other commands
(the task flags, the run directory, the layout line, usage errors) comes as a `Kit` from
cli/command.py, which builds the parser: this module cannot import that one back (no
import cycle, tests/test_layers.py).
"""
from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Callable, NamedTuple


class Kit(NamedTuple):
    """cli/command.py's pieces the frontier command uses (see there)."""

    add_training_args: Callable     # (parser, command, overrides)
    config_from_args: Callable      # (args, **fixed) -> TrainConfig
    start_jax: Callable             # (replicas)
    layout: Callable                # (cfg) -> the true layout line
    ensure_writable: Callable       # (path, option="--out", *, default) -> created
    default_out: Callable           # (prefix) -> runs/<prefix>-<time>
    user_input: Callable            # a context: ValueError -> usage error
    usage_error: type
    default_task: dict              # compare's default task
    default_task_note: str
    overrides_note: Callable        # (command, overrides) -> the help's sentence


def frontier_task(default_task: dict) -> dict:
    """The frontier's task: compare's default task, evaluated every 100 steps (the same runs)."""
    return {**default_task, "eval_every": 100}


def add_frontier(sub, kit: Kit) -> None:
    from ..analysis.frontier import DEFAULT_LEVELS
    from .strategy_args import HelpFormatter, add_strategy_args, strategy_epilog
    from .task_flag import add_task_flag

    task = frontier_task(kit.default_task)
    p = sub.add_parser("frontier", help="every method swept over its budget knob: which wins at each budget",
                       description=f"Every method over its declared budget grid, with seeds. The default task: "
                                   f"{kit.default_task_note} {kit.overrides_note('frontier', task)} "
                                   f"Writes frontier.json, frontier.md and frontier.png.",
                       formatter_class=HelpFormatter, epilog=strategy_epilog())
    kit.add_training_args(p, "frontier", task)
    add_task_flag(p)
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
    p.set_defaults(func=functools.partial(cmd_frontier, kit=kit))


def parse_levels(text: str) -> tuple[float, ...]:
    from ..analysis.frontier import check_levels

    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(f"--levels {text!r} must be comma-separated shares of BSP's bytes, e.g. 0.02,0.1,0.3,1") \
            from None
    return check_levels(values)


def cmd_frontier(args, kit: Kit) -> int:
    from ..analysis.job import kept_compilations

    kit.start_jax(args.replicas)
    if args.resume_job and not args.out:
        raise kit.usage_error("--resume needs --out DIR: the directory of the frontier to continue")
    out = args.out or kit.default_out("frontier")
    with kept_compilations(out):   # before anything compiles
        return _frontier(args, out, kit)


def _frontier(args, out: str, kit: Kit) -> int:
    from ..analysis.frontier import check_fresh, plan_frontier, run_frontier
    from ..analysis.frontier_report import format_verdict
    from ..data.paths import undo_created

    from .task_flag import task_line

    with kit.user_input():
        levels = parse_levels(args.levels)
        base = kit.config_from_args(args, strategy="bsp")   # each point sets its strategy
        plan = plan_frontier(base, args.methods, args.grid, args.seeds)   # every point, before anything trains
        layout = kit.layout(base)
        check_fresh(Path(out), args.resume_job)
    created = kit.ensure_writable(out, default=not args.out)
    cells = len(plan.variants) * args.seeds

    def start():
        print(f"run directory: {out}", flush=True)
        print(task_line(base, args), flush=True)
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
