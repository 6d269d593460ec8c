"""`jaxsel calibrate`: a short BSP probe on the task, and the delta that fires on 5, 10, 25
and 50 % of the steps under each of SelSync's statistics (analysis/calibrate.py).

The command takes `jaxsel compare`'s task flags and defaults (its probe runs are compare's
BSP cells), the significance test's window, alpha and warm-up (SelSync's defaults), the
delta to report the firing share of (the authors' 0.3), the seeds, the directory and
`--resume`. What it shares with the other commands comes as frontier's `Kit` (cli/frontier.py)
from cli/command.py, which builds the parser and which this module cannot import (no
import cycle, tests/test_layers.py).
"""
from __future__ import annotations

import functools
import time
from pathlib import Path


def add_calibrate(sub, kit) -> None:
    from ..strategies.selsync import SelSync
    from .strategy_args import HelpFormatter
    from .task_flag import add_task_flag

    defaults = SelSync()
    p = sub.add_parser("calibrate", help="which SelSync delta fires how often on this task, for both statistics",
                       description=f"A BSP probe on the task, and each statistic's Delta_bar: the delta that fires on "
                                   f"5/10/25/50% of the steps after the warm-up, its median, p90 and max. The default "
                                   f"task: {kit.default_task_note} {kit.overrides_note('calibrate', kit.default_task)} "
                                   f"Writes calibration.json and calibration.png.",
                       formatter_class=HelpFormatter)
    kit.add_training_args(p, "calibrate", kit.default_task)
    add_task_flag(p)
    p.add_argument("--window", type=int, default=defaults.window, metavar="W", help="the significance test's window")
    p.add_argument("--alpha", type=float, default=defaults.alpha, help="its EWMA decay")
    p.add_argument("--warmup", type=int, default=None, metavar="STEPS",
                   help="forced steps left out of the figures (default: each statistic's own, W-1 raw, 2W-1 smoothed)")
    p.add_argument("--delta", type=float, default=defaults.delta, help="report the share of steps this delta fires on")
    p.add_argument("--seeds", type=int, default=1, metavar="K", help="probe with seeds --seed .. --seed+K-1, pooled")
    p.add_argument("--out", default=None, help="directory (default runs/calibrate-<time>)")
    p.add_argument("--resume", dest="resume_job", action="store_true",
                   help="continue the calibration stopped in --out (same settings): finished runs are loaded")
    p.set_defaults(func=functools.partial(cmd_calibrate, kit=kit))


def cmd_calibrate(args, kit) -> int:
    from ..analysis.job import kept_compilations

    kit.start_jax(args.replicas)
    if args.resume_job and not args.out:
        raise kit.usage_error("--resume needs --out DIR: the directory of the calibration to continue")
    out = args.out or kit.default_out("calibrate")
    with kept_compilations(out):
        return _calibrate(args, out, kit)


def _calibrate(args, out: str, kit) -> int:
    from ..analysis.calibrate import FILES, Significance, format_calibration, held, probe_configs, run_calibration
    from ..analysis.job import check_start
    from ..analysis.seed_grid import check_seeds
    from ..data.paths import undo_created
    from ..training.config import check_config

    from .task_flag import task_line

    with kit.user_input():
        sig = Significance(window=args.window, alpha=args.alpha, warmup=args.warmup, delta=args.delta)
        base = kit.config_from_args(args, strategy="bsp")
        check_seeds(base, args.seeds)
        for cfg in probe_configs(base, Path(out), args.seeds):
            check_config(cfg)
        layout = kit.layout(base)
        check_start(Path(out), "calibrate", resume=args.resume_job, held=held(Path(out)))
    created = kit.ensure_writable(out, default=not args.out)

    def start():
        print(f"run directory: {out}", flush=True)
        print(task_line(base, args), flush=True)
        print(f"layout: {layout}", flush=True)

    started = time.perf_counter()
    with undo_created(out, created):
        result = run_calibration(base, out, sig, seeds=args.seeds, resume=args.resume_job,
                                 announce=lambda text: print(text, flush=True), on_start=start)
    print(f"\n{layout}; took {time.perf_counter() - started:.0f} s")
    print(format_calibration(result))
    print(f"\nwrote {out}/{FILES[0]} and {FILES[1]}")
    return 0
