"""`jaxsel train`: one strategy, one run directory, checkpoints, multi-host.

The command's settings become one plan (training/plan.py: every check, the layout, the
data, the strategy) and the plan trains (training/train.py), which makes the run's
directories only once its last checks have passed, and says where they are. A multi-host
run starts jax.distributed and a peer watchdog first, and runs in a supervised child
process where the platform allows (training/supervisor.py).
"""
from __future__ import annotations

import dataclasses
import os
import sys

from ..core.checks import INT32_MAX
from ..training.tasks import DEFAULT_TASK_NAME, TASKS
from .common import (HelpFormatter, UsageError, check_path_text, default_out, overrides_note, request_devices,
                     user_input)
from .job_args import Job, add_job_args
from .strategy_args import add_strategy_args
from .settings_args import config_from_args
from .task_args import add_task_args
from .task_flag import add_task_flag, task_line

#: `jaxsel train`'s own defaults (flags override each): the default named task's settings,
#: the same task `jaxsel compare` runs (training/tasks.py), so a run of `train` without
#: flags is one row of the default comparison; and the command line checkpoints a run.
#: A library TrainConfig() keeps its own defaults (digits, SelDP shards, a constant lr, no
#: checkpoints): a checkpoint's settings that lack one ran at TrainConfig's default and are
#: read so (checkpoint.py), and the tests' and users' TrainConfig(...) runs (the golden
#: records among them) would all change. A run directory's config.json that lacks one ran
#: at train's old default, and is read so (training/old_records.py). The strategy stays
#: train's own (selsync): a task names no strategy.
TRAIN_DEFAULTS = {**TASKS[DEFAULT_TASK_NAME].settings, "checkpoint_every": 100}
TRAIN_DEFAULTS_NOTE = (f"Without task flags a run trains task {DEFAULT_TASK_NAME}, `jaxsel compare`'s default "
                       f"(--task picks another). --no-checkpoint writes none.")
JOB = Job("run directory", "runs/<strategy>-<time>", "the run from its newest checkpoint",
          "TrainConfig's settings; RUN_DIR/config.json reproduces that run")


#: what `jaxsel train --help` opens with
TRAIN_PURPOSE = ("Train one strategy on a task, checkpointing as it goes (--resume continues it): its results "
                 "are printed and written to its run directory.")


def add_parser(sub) -> None:
    p = sub.add_parser("train", usage="%(prog)s [OPTIONS]",
                       help="train one strategy", formatter_class=HelpFormatter,
                       description=f"{TRAIN_PURPOSE}\n\n" + overrides_note("train", TRAIN_DEFAULTS) + " " + TRAIN_DEFAULTS_NOTE)
    add_job_args(p.add_argument_group("run: its directory, resuming it, a config file"), JOB)
    groups = add_task_args(p, "train", TRAIN_DEFAULTS)
    add_task_flag(groups["data"])
    add_strategy_args(groups["strategy"])
    groups["checkpoints"].add_argument("--no-checkpoint", action="store_true", help="write no checkpoints")
    m = p.add_argument_group("multi-host (jax.distributed; every process runs the same command)")
    m.add_argument("--coordinator", default=None, metavar="HOST:PORT", help="process 0's address")
    m.add_argument("--num-processes", type=int, default=None, help="number of processes")
    m.add_argument("--process-id", type=int, default=None, help="this process's index, 0..P-1")
    m.add_argument("--distributed", choices=("off", "auto"), default="off",
                   help="auto: let jax.distributed detect the cluster (SLURM, Open MPI, TPU, ...)")
    m.add_argument("--peer-timeout", type=float, default=60.0,
                   help="seconds without a peer's heartbeat before this process exits")
    m.add_argument("--join-timeout", type=float, default=120.0,
                   help="seconds for every process to join; the missing ones are named")
    p.set_defaults(func=cmd_train)


def multihost(args) -> bool:
    return bool(args.coordinator or args.distributed == "auto")


def _start_processes(args):
    """Simulated CPU devices and, for a multi-host run, jax.distributed plus the peer
    watchdog; all before JAX starts its backends. Returns the watchdog (or None)."""
    from ..training import distributed

    auto = args.distributed == "auto"
    check_layout(args)
    if not multihost(args):
        request_devices(args.replicas)
        return None
    if args.num_processes and "JAX_NUM_CPU_DEVICES" not in os.environ:
        from ..core.parallel import request_cpu_devices

        request_cpu_devices(max(1, args.replicas // args.num_processes))  # CPU hosts only
    with user_input():   # --distributed auto found no cluster
        return distributed.start(args.coordinator, args.num_processes, args.process_id, auto=auto,
                                 peer_timeout=args.peer_timeout, join_timeout=args.join_timeout)


def check_layout(args) -> None:
    """The multi-host flags, before any process starts."""
    from ..training.process_layout import check_process_layout

    for flag, value in (("--num-processes", args.num_processes), ("--process-id", args.process_id)):
        if value is not None and value > INT32_MAX:   # jax.distributed takes 32-bit counts
            raise UsageError(f"{flag} must be an integer <= {INT32_MAX}, got {value}")
    with user_input():
        check_process_layout(args.coordinator, args.num_processes, args.process_id,
                             args.distributed == "auto", args.peer_timeout, args.join_timeout)


def supervised(args, argv: list[str]) -> int:
    """A multi-host `train` runs in a child process that reports a gloo abort clearly."""
    from ..training import early_stop, supervisor

    check_layout(args)   # usage errors from here, before a child starts
    early_stop.check()
    who = (f"process {args.process_id} of {args.num_processes}" if args.process_id is not None
           else "this process")
    return supervisor.supervise([sys.executable, "-m", "jaxsel.cli", *argv], who)


def _check_train_args(args) -> None:
    """What `jaxsel train` can refuse before JAX starts."""
    if args.resume and args.out is None and args.checkpoint_dir is None:
        raise UsageError("--resume needs --out RUN_DIR or --checkpoint-dir DIR to know which run to continue")
    if args.resume and args.no_checkpoint:
        raise UsageError("--resume and --no-checkpoint contradict each other; drop one")
    for option, path in (("--out", args.out), ("--checkpoint-dir", args.checkpoint_dir),
                         ("--data-dir", args.data_dir)):
        check_path_text(path, option)


def _train_config(args, out: str):
    """The TrainConfig `jaxsel train` asks for: its flags, over the recorded settings of the
    run it resumes (training/recorded.py), or over --config FILE's."""
    with user_input():
        cfg = config_from_args(args, out_dir=out, resume=args.resume)
        if args.no_checkpoint:
            cfg = dataclasses.replace(cfg, checkpoint_dir=None, checkpoint_every=None, resume=False)
    return cfg


def resumed_note(args, cfg, planned=None) -> str | None:
    """A resume of a run that records its settings: the header's line saying so, naming
    what the flags given change and, where `planned` (the plan's settings) resumes to
    another length, that fractional LR milestones stay where they were; a change of its
    results is refused (one line)."""
    from ..training.lr_schedule import fixed_milestones_note
    from ..training.recorded import resume_changes
    from ..training.rundir import CONFIG_FILE

    if getattr(args, "recorded", None) is None:
        return None
    if getattr(args, "task", None) is not None:   # its settings would lose to the record's, its name would not
        raise UsageError(f"--task {args.task} with --resume: the run in {args.out} continues with the settings "
                         f"{args.out}/{CONFIG_FILE} records, which a task does not change; leave --task out")
    allowed, refused = resume_changes(args.recorded, cfg)
    if refused:
        raise UsageError(f"resuming {args.out}: {'; '.join(refused)} would change the results of the run it "
                         f"holds; leave those flags out to continue it, or start a new run in another --out")
    changed = f"the flags given change {', '.join(allowed)}" if allowed else "no flag given changes them"
    opt = cfg.optim
    kept = fixed_milestones_note(opt.lr_schedule, planned.lr_schedule_length, opt.steps) if planned else None
    return f"resumed: with the settings {args.out}/{CONFIG_FILE} records; {changed}" + (f"; {kept}" if kept else "")


def cmd_train(args) -> int:
    from ..training import early_stop
    from .backend import start_backend

    _check_train_args(args)
    watchdog = _start_processes(args)
    start_backend()
    import jax

    from ..training.plan import plan_run
    from ..training.train import train

    lead = jax.process_index() == 0
    out = args.out if args.out is not None else default_out(args.strategy.split(":")[0])
    try:
        cfg = _train_config(args, out)
        head = (task_line(cfg, args),)   # the task the settings are, and what of it was changed
        plan = plan_run(cfg, claim=args.out is None, announce=head if lead else None)   # every check; nothing made
        args.run_dir = plan.paths.out_dir   # a stop from here on names it in the command that continues
        note = resumed_note(args, cfg, plan.cfg)   # after the plan's checks: a run that cannot be resumed says so first
        if note and lead:
            plan = dataclasses.replace(plan, announce=(*plan.announce, note))
        early_stop.check()   # a Ctrl-C so far: stop before anything is created
        result = train(plan)
    except BaseException as err:
        if watchdog is not None:   # never leave the other processes waiting in a collective
            from ..training.distributed import leave_after_error

            leave_after_error(watchdog, err, f"jaxsel {args.command}")
        raise
    if watchdog is not None:
        watchdog.finish()
    if lead:
        print_summary(result.final)
    return 0


def print_summary(final: dict) -> None:
    """The run's final figures, 4 significant digits, no negative zeros; byte counts in the
    largest unit they fill and exactly, "79.4 MB (79390200 bytes)" (final.json keeps the
    integers)."""
    from ..training.numbers import byte_size, significant

    for k, v in final.items():
        if k != "projection":
            shown = significant(v) if isinstance(v, float) else v
            if "bytes" in k and isinstance(v, (int, float)) and not isinstance(v, bool):
                shown = byte_size(v, exact=True)
            if isinstance(v, dict) and "per_replica" in v:   # replica_accuracy, replica_loss
                shown = f"mean {significant(v['mean'])}, min {significant(v['min'])}, max {significant(v['max'])}"
            print(f"{k:>22}: {shown}")
    p = final["projection"]
    print(f"{'projected on':>22}: {p['network']}, stragglers {p['stragglers']} (compute "
          f"{significant(p['compute'])} s, waiting {significant(max(p['waiting'], 0.0))} s, communication "
          f"{significant(p['communication'])} s)")

