"""`jaxsel calibrate`: a short BSP probe on the task, and the delta that fires on 5, 10, 25
and 50 % of the steps under each of SelSync's statistics (analysis/calibrate.py).

The command takes `jaxsel compare`'s task (its probe runs are compare's BSP cells) and job
flags, the significance test's window, alpha and warm-up (SelSync's defaults), and the
delta to report the firing share of (the authors' 0.3).
"""
from __future__ import annotations

import time
from pathlib import Path

from ..training.job_builds import one_job
from .common import HelpFormatter, default_out, ensure_writable, layout_line, overrides_note, start_jax, user_input
from .compare import DEFAULT_TASK, DEFAULT_TASK_NOTE
from .job_args import Job, add_job_args, check_resume
from .settings_args import config_from_args
from .task_args import add_task_args
from .task_flag import add_task_flag, task_line

JOB = Job("calibration directory", "runs/calibrate-<time>",
          "the calibration stopped there (same settings): finished runs are loaded", "TrainConfig's settings",
          seeds=True, seeds_default=1, seeds_help="probe with seeds --seed .. --seed+K-1, pooled")


def add_parser(sub) -> None:
    p = sub.add_parser("calibrate", usage="%(prog)s [OPTIONS]",
                       help="which SelSync delta fires how often on this task, for both statistics",
                       description=f"A BSP probe on the task, and each statistic's Delta_bar: the delta that fires on "
                                   f"5/10/25/50% of the steps after the warm-up, its median, p90 and max. The default "
                                   f"task: {DEFAULT_TASK_NOTE} {overrides_note('calibrate', DEFAULT_TASK)} "
                                   f"Writes calibration.json and calibration.png.",
                       formatter_class=HelpFormatter)
    job = p.add_argument_group("the calibration: its directory, seeds and significance test (default: SelSync's)")
    add_job_args(job, JOB)
    job.add_argument("--window", type=int, default=None, metavar="W", help="the significance test's window")
    job.add_argument("--alpha", type=float, default=None, help="its EWMA decay")
    job.add_argument("--warmup", type=int, default=None, metavar="STEPS",
                     help="forced steps left out of the figures (default: each statistic's own, W-1 raw, 2W-1 "
                          "smoothed)")
    job.add_argument("--delta", type=float, default=None, help="report the share of steps this delta fires on")
    add_task_flag(add_task_args(p, "calibrate", DEFAULT_TASK)["data"])
    p.set_defaults(func=cmd_calibrate)


@one_job()   # each cell's strategy and layout built once, from its checks to its tables
def cmd_calibrate(args) -> int:
    from ..analysis.job import kept_compilations

    start_jax(args.replicas)
    check_resume(args, JOB)
    out = args.out or default_out("calibrate")
    with kept_compilations(out):
        return _calibrate(args, out)


def _calibrate(args, out: str) -> int:
    from ..analysis.calibrate import FILES, Significance, format_calibration, held, probe_configs, run_calibration
    from ..analysis.job import check_start
    from ..analysis.seed_grid import check_seeds
    from ..data.paths import undo_created
    from ..strategies.selsync import SelSync
    from ..training.config import check_config

    own = SelSync()   # the significance test's defaults are SelSync's
    with user_input():
        sig = Significance(window=own.window if args.window is None else args.window,
                           alpha=own.alpha if args.alpha is None else args.alpha, warmup=args.warmup,
                           delta=own.delta if args.delta is None else args.delta)
        base = config_from_args(args, strategy="bsp")
        check_seeds(base.optim, args.seeds)
        for cfg in probe_configs(base, Path(out), args.seeds):
            check_config(cfg)
        layout = layout_line(base)
        check_start(Path(out), "calibrate", resume=args.resume, held=held(Path(out)))
    top = ensure_writable(out)

    def start():
        args.run_dir = out   # a stop from here on names it in the command that continues
        print(f"run directory: {out}", flush=True)
        print(task_line(base, args), flush=True)
        print(f"layout: {layout}", flush=True)

    started = time.perf_counter()
    with undo_created(top or out, top is not None):
        result = run_calibration(base, out, sig, seeds=args.seeds, resume=args.resume,
                                 announce=lambda text: print(text, flush=True), on_start=start)
    print(f"\n{layout}; took {time.perf_counter() - started:.0f} s")
    print(format_calibration(result))
    print(f"\nwrote {out}/{FILES[0]} and {FILES[1]}")
    return 0
