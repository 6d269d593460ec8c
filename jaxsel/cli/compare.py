"""`jaxsel compare`, the default job: strategies (and variants of one) side by side, over
seeds, on one task (analysis/compare.py): a table, results.json and five pictures.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from ..training.job_builds import one_job
from .common import (HelpFormatter, default_out, ensure_writable, job_layout_line, overrides_note, start_job_jax,
                     user_input)
from .job_args import Job, add_job_args, check_resume, shard_of
from .strategy_args import add_strategy_args
from ..training.tasks import DEFAULT_TASK_NAME, TASKS
from .settings_args import config_from_args
from .task_args import add_task_args
from .task_flag import add_task_flag, task_line

DEFAULT_STRATEGIES = "bsp,localsgd,selsync"
#: `jaxsel compare`'s own defaults beside its task's: evaluations for the time-to-accuracy
COMPARE_DEFAULTS = {"eval_every": 25}
#: `jaxsel compare`'s defaults (flags override each): the default named task's settings
#: (training/tasks.py; `--task` picks another) and compare's own
DEFAULT_TASK = {**TASKS[DEFAULT_TASK_NAME].settings, **COMPARE_DEFAULTS}
#: compare's description (printed as written: argparse %-formats help strings, not descriptions)
DEFAULT_TASK_NOTE = (f"task {DEFAULT_TASK_NAME} ({TASKS[DEFAULT_TASK_NAME].summary}; --task "
                     + "; --task ".join(f"{t.name}: {t.summary}" for t in TASKS.values() if t.name != DEFAULT_TASK_NAME)
                     + "); SelSync's data injection with --inject ALPHA,BETA.")
JOB = Job("comparison directory", "runs/compare-<time>",
          "the comparison stopped there (same settings): its finished runs are loaded, the rest run",
          "TrainConfig's settings, strategies, seeds, ...", seeds=True, shards=True)


def add_parser(sub) -> None:
    p = sub.add_parser("compare", usage="%(prog)s [OPTIONS]",
                       help="train several strategies side by side (the default job)",
                       description=f"The default job: {DEFAULT_TASK_NOTE} {overrides_note('compare', DEFAULT_TASK)}",
                       formatter_class=HelpFormatter)
    job = p.add_argument_group("the comparison: its directory, seeds, baseline and target")
    add_job_args(job, JOB)
    job.add_argument("--match-budget", action=argparse.BooleanOptionalAction, default=None,
                     help="add local SGD with as many syncs as each adaptive row (selsync, ...), and say whether "
                          "the row beat it beyond the seed spread (default: on)")
    job.add_argument("--attribution", action="store_true",
                     help="also train BSP and each adaptive row's always-sync twins, and split its gap to local SGD "
                          "into what its selection and its averaging order cost")
    job.add_argument("--target", default="99%", metavar="ACC|PCT%",
                     help="time-to-accuracy target: an accuracy (0.6) or a share of BSP's final accuracy (99%%)")
    groups = add_task_args(p, "compare", DEFAULT_TASK)
    add_task_flag(groups["data"])
    add_strategies_arg(groups["strategy"], DEFAULT_STRATEGIES)
    add_strategy_args(groups["strategy"])
    p.set_defaults(func=cmd_compare)


def add_strategies_arg(group, default: str | None) -> None:
    group.add_argument("--strategies", default=default, metavar="ENTRIES",
                       help="comma-separated entries NAME[:KEY=VALUE...], e.g. "
                            "bsp,localsgd:period=8,selsync:delta=0.05; --opt options are defaults for every entry "
                            "that takes them")


@one_job()   # each cell's strategy and layout built once, from its checks to its tables
def cmd_compare(args) -> int:
    start_job_jax(args)
    check_resume(args, JOB)
    with user_input():
        args.shard = shard_of(args, JOB)
    return _compare(args, args.out or default_out("compare"))


def _compare(args, out: str) -> int:
    from ..analysis.attribution import attribution_entries
    from ..analysis.compare import (PICTURES, check_data, check_fresh, format_table, plan_rows, run_comparison,
                                    summary_line)
    from ..analysis.matched_budget import built, is_adaptive
    from ..core.options import OptionError
    from ..analysis.job import kept_compilations
    from ..analysis.job_layout import job_layout
    from ..analysis.shard import joins
    from ..analysis.time_to_accuracy import parse_target
    from ..data.paths import undo_created
    from ..training.rundir.claim import claim_new_dir
    from ..training.run_kinds import refuse_run

    match = args.match_budget is not False   # on unless --no-match-budget
    with user_input():
        parse_target(args.target)
        given = config_from_args(args, strategy="bsp")   # each row sets its strategy
        base = job_layout(given, args.batch_cells)   # analysis/job_layout.py
        if args.attribution and args.match_budget is False:
            raise OptionError("--attribution splits an adaptive row's gap to its budget-matched baselines; "
                              "drop --no-match-budget")
        if args.attribution:   # the rows the attribution needs (analysis/attribution.py)
            args.strategies = attribution_entries(base, args.strategies, lambda v: is_adaptive(built(base, v)))
        plan = plan_rows(base, args.strategies, args.seeds, match)   # every entry, before anything trains
        layout = job_layout_line(base, given, args.batch_cells)
        check_fresh(Path(out), args.resume or joins(Path(out), args.shard))
        refuse_run(out)   # a `jaxsel train` run's directory
    check_data(base)
    if args.out:
        top = ensure_writable(out)
        undo = undo_created(top or out, top is not None)
    else:   # runs/compare-<time>[-N]: a name no other comparison has
        out = claim_new_dir(out)
        undo = undo_created(out, True)

    def start():   # the directory is ours (locked, fresh): say what runs where
        args.run_dir = out   # a stop from here on names it in the command that continues
        print(f"run directory: {out}", flush=True)
        print(task_line(base, args), flush=True)
        print(f"layout: {layout}", flush=True)
        if args.shard is not None:
            print(args.shard.describe(), flush=True)
        if args.match_budget and not any(m for _, m in plan):
            print("--match-budget: no row's sync pattern is adaptive (decided during the run); no baseline added")

    started = time.perf_counter()
    with undo, kept_compilations(out, args.shard):   # before anything compiles
        done = run_comparison(base, args.strategies, out, target=args.target, seeds=args.seeds, match_budget=match,
                              plan=plan, on_start=start, announce=lambda text: print(text, flush=True),
                              resume=args.resume, shard=args.shard, batch_cells=args.batch_cells)
    if done is None:   # a shard that ended before the others (it said so)
        return 0
    print(f"\n{summary_line(base, args.seeds, layout, time.perf_counter() - started)}")
    print(format_table(done.rows))
    print(f"\nwrote {out}/results.json and {', '.join(PICTURES)}")
    return 0

