"""The `jaxsel` command's parser and subcommands (train, compare, frontier, calibrate, report, bench, ...).

Bad input exits with code 2 and one line naming the value and what is allowed.
"""
from __future__ import annotations

import argparse
import contextlib
import errno
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from ..core.checks import INT32_MAX

from ..training.tasks import DEFAULT_TASK_NAME, TASKS

DEFAULT_STRATEGIES = "bsp,localsgd,selsync"
#: `jaxsel compare`'s own defaults beside its task's: evaluations for the time-to-accuracy
COMPARE_DEFAULTS = {"eval_every": 25}
#: `jaxsel compare`'s defaults (flags override each): the default named task's settings
#: (training/tasks.py; `--task` picks another) and compare's own
DEFAULT_TASK = {**TASKS[DEFAULT_TASK_NAME].settings, **COMPARE_DEFAULTS}
#: `jaxsel train`'s own defaults: the command line checkpoints a run (a library TrainConfig
#: writes no checkpoints unless asked, so its checkpoint_every is None)
TRAIN_DEFAULTS = {"checkpoint_every": 100}
TRAIN_DEFAULTS_NOTE = "--no-checkpoint writes none."
#: compare's description (printed as written: argparse %-formats help strings, not descriptions)
DEFAULT_TASK_NOTE = (f"task {DEFAULT_TASK_NAME} ({TASKS[DEFAULT_TASK_NAME].summary}; --task "
                     + "; --task ".join(f"{t.name}: {t.summary}" for t in TASKS.values() if t.name != DEFAULT_TASK_NAME)
                     + "); SelSync's data injection with --inject ALPHA,BETA.")


class UsageError(ValueError):
    """Bad user input: reported as one line, exit code 2."""


@contextmanager
def user_input():
    """A ValueError raised while checking what the user asked for is a usage error (exit 2);
    elsewhere a ValueError is a bug and keeps its traceback."""
    try:
        yield
    except UsageError:
        raise
    except ValueError as err:
        raise UsageError(str(err)) from None


def _user_errors() -> tuple[type, ...]:
    """Errors about the user's input found while running: one line, exit code 2."""
    from ..data.formats import FormatError
    from ..data.paths import UnusablePath
    from ..data.prepare import CannotPrepare
    from ..data.sources import DatasetNotPrepared
    from ..training.checkpoint import CheckpointError, CheckpointMismatch
    from ..training.config import ConfigError
    from ..training.distributed import SettingsMismatch
    from ..training.runlock import RunLocked
    from .backend import JaxEnvironmentError

    return (UsageError, ConfigError, CheckpointMismatch, CheckpointError, DatasetNotPrepared, RunLocked,
            SettingsMismatch, UnusablePath, FormatError, CannotPrepare, JaxEnvironmentError)


#: file-system failures a user can fix (disk full, quota, read-only, permissions)
FS_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR,
                       errno.EISDIR, errno.ENAMETOOLONG})
REPORT_BUGS = "this is a bug in jaxsel; please report it with the command line and the traceback above"


def _run_faults() -> tuple[type, ...]:
    """Training faults reported as one line with exit code 1 (imported only when raised);
    an installed JAX, Flax or Orbax that lost something jaxsel relies on is one too."""
    from ..core.library_changes import LibraryChanged
    from ..training.distributed import PeerLostError
    from ..training.faults import NonFiniteError

    return (NonFiniteError, PeerLostError, LibraryChanged)


def _interrupted() -> type:
    from ..training.faults import TrainingInterrupted

    return TrainingInterrupted


def add_training_args(p: argparse.ArgumentParser, command: str, overrides: dict | None = None) -> None:
    """`command`'s TrainConfig flags (generated: config_args.py) and --global-batch-size (the
    strategy flags come last: `add_strategy_args`)."""
    from .config_args import add_config_args

    add_config_args(p, command, overrides)
    p.add_argument("--global-batch-size", type=int, default=None,
                   help="total batch over all replicas (instead of --batch-size; divisible by --replicas)")


def config_from_args(args, **fixed):
    """The TrainConfig of `args` (its command's flags, then --config FILE's remaining
    settings); `fixed`: fields the command sets itself (compare's placeholder strategy,
    train's run directory)."""
    from ..training.config import TrainConfig
    from ..training.config_file import apply_to_config
    from .config_args import config_values
    from .strategy_args import options_from_args

    values = {**config_values(args, args.command), **fixed}
    values["strategy_options"] = {k: v for k, v in options_from_args(args).items() if v is not None}
    values["batch_size"] = _per_replica_batch(args)
    return apply_to_config(TrainConfig(**values), getattr(args, "config_rest", None))   # --config FILE


def _per_replica_batch(args) -> int:
    """--batch-size, or --global-batch-size split evenly over the replicas."""
    total = getattr(args, "global_batch_size", None)
    if total is None:
        return args.batch_size
    if total < 1 or args.replicas < 1 or total % args.replicas:
        raise UsageError(f"--global-batch-size {total} must be a positive multiple of --replicas "
                         f"{args.replicas} (each replica gets an equal share)")
    return total // args.replicas


def add_run_control_args(p: argparse.ArgumentParser) -> None:
    """`jaxsel train`'s own options: no checkpoints, and the multi-host ones."""
    p.add_argument("--no-checkpoint", action="store_true", help="write no checkpoints")
    m = p.add_argument_group("multi-host (jax.distributed; every process runs the same command)")
    m.add_argument("--coordinator", default=None, metavar="HOST:PORT", help="process 0's address")
    m.add_argument("--num-processes", type=int, default=None, help="number of processes")
    m.add_argument("--process-id", type=int, default=None, help="this process's index, 0..P-1")
    m.add_argument("--distributed", choices=("off", "auto"), default="off",
                   help="auto: let jax.distributed detect the cluster (SLURM, Open MPI, TPU, ...)")
    m.add_argument("--peer-timeout", type=float, default=60.0,
                   help="seconds without a heartbeat before a peer counts as dead and this process exits")
    m.add_argument("--join-timeout", type=float, default=120.0,
                   help="seconds for every process to join the job; the processes that did not are named")


def _start_processes(args):
    """Simulated CPU devices and, for a multi-host run, jax.distributed plus the peer
    watchdog; all before JAX starts its backends. Returns the watchdog (or None)."""
    from ..training import distributed

    auto = args.distributed == "auto"
    _check_layout(args)
    if not (auto or args.coordinator):
        _start_jax(args.replicas)
        return None
    if args.num_processes and "JAX_NUM_CPU_DEVICES" not in os.environ:
        from ..core.parallel import request_cpu_devices

        request_cpu_devices(max(1, args.replicas // args.num_processes))  # CPU hosts only
    with user_input():   # --distributed auto found no cluster
        return distributed.start(args.coordinator, args.num_processes, args.process_id, auto=auto,
                                 peer_timeout=args.peer_timeout, join_timeout=args.join_timeout)


def _check_layout(args) -> None:
    from ..training.distributed import check_process_layout

    for flag, value in (("--num-processes", args.num_processes), ("--process-id", args.process_id)):
        if value is not None and value > INT32_MAX:   # jax.distributed takes 32-bit counts
            raise UsageError(f"{flag} must be an integer <= {INT32_MAX}, got {value}")
    with user_input():
        check_process_layout(args.coordinator, args.num_processes, args.process_id,
                             args.distributed == "auto", args.peer_timeout, args.join_timeout)


def _supervised_train(args, argv: list[str]) -> int:
    """A multi-host `train` runs in a child process that reports a gloo abort clearly."""
    from ..training import early_stop, supervisor

    _check_layout(args)   # usage errors from here, before a child starts
    early_stop.check()
    who = (f"process {args.process_id} of {args.num_processes}" if args.process_id is not None
           else "this process")
    return supervisor.supervise([sys.executable, "-m", "jaxsel.cli", *argv], who)


def _default_out(prefix: str) -> str:
    """runs/<prefix>-<time>, or -2, -3, ... if taken: the name the run will claim once every
    check has passed (`paths.claim_new_dir`, atomic: two runs never get the same one)."""
    from ..data.paths import free_name

    return free_name(Path("runs") / f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}")


def _check_path_text(path: str | None, option: str) -> None:
    """A path that cannot be written as UTF-8 (bytes from a broken locale) breaks every
    log line and JSON file that names it: refuse it up front."""
    if path is None:
        return
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"{option} {ascii(str(path))} is not valid UTF-8; choose a path that is") from None


def _ensure_writable(path: str, option: str = "--out", *, default: bool = False) -> bool:
    """Make `path` a writable directory; True if this created it. Of a path the user typed
    only the last component is created (a typo in a parent is an error, not a new tree);
    jaxsel's own defaults (runs/..., checkpoints/...) get their parents too. The run prints
    its directory itself, so the creation is not announced again."""
    from ..data.paths import writable_dir

    _check_path_text(path, option)
    return writable_dir(path, option, parents=default, quiet=True)


def _start_backend() -> None:
    from .backend import start_backend

    start_backend()


def _start_jax(replicas: int) -> None:
    """Give a CPU-only host enough simulated devices before JAX initialises."""
    from ..core.parallel import request_cpu_devices

    request_cpu_devices(max(8, replicas))


def _layout(cfg) -> str:
    """The true layout line of a run's config; replicas that do not fit: a usage error."""
    from ..core.parallel import choose_layout

    return choose_layout(cfg.replicas, devices=cfg.devices, platform=cfg.platform).describe()


def cmd_compare(args) -> int:
    _start_jax(args.replicas)
    _start_backend()
    if args.resume_job and not args.out:
        raise UsageError("--resume needs --out DIR: the directory of the comparison to continue")
    return _compare(args, args.out or _default_out("compare"))


def _compare(args, out: str) -> int:
    from ..analysis.compare import PICTURES, check_fresh, format_table, plan_rows, run_comparison
    from ..analysis.job import kept_compilations
    from ..analysis.time_to_accuracy import parse_target
    from ..data.paths import claim_new_dir, undo_created
    from ..data.sources import check_prepared
    from ..training.run_kinds import refuse_run

    from ..training.tasks import task_of

    from .task_flag import task_line

    match = args.match_budget is not False   # on unless --no-match-budget
    with user_input():
        parse_target(args.target)
        base = config_from_args(args, strategy="bsp")   # each row sets its strategy
        plan = plan_rows(base, args.strategies, args.seeds, match)   # every entry, before anything trains
        layout = _layout(base)
        check_fresh(Path(out), args.resume_job)
        refuse_run(out)   # a `jaxsel train` run's directory
    check_prepared(base.dataset, base.data_dir)
    if args.out:
        created = _ensure_writable(out)
    else:   # runs/compare-<time>[-N]: a name no other comparison has
        out, created = claim_new_dir(out), True

    def start():   # the directory is ours (locked, fresh): say what runs where
        print(f"run directory: {out}", flush=True)
        print(task_line(base, args), flush=True)
        print(f"layout: {layout}", flush=True)
        if args.match_budget and not any(m for _, m in plan):
            print("--match-budget: no row's sync pattern is adaptive (decided during the run); no baseline added")

    started = time.perf_counter()
    with undo_created(out, created), kept_compilations(out):   # before anything compiles
        done = run_comparison(base, args.strategies, out, target=args.target, seeds=args.seeds, match_budget=match,
                              plan=plan, on_start=start, announce=lambda text: print(text, flush=True),
                              resume=args.resume_job)
    seeds = f"seeds {base.seed}-{base.seed + args.seeds - 1}" if args.seeds > 1 else f"seed {base.seed}"
    options = ", ".join(f"{k}={v}" for k, v in base.strategy_options.items())
    named = task_of(base)
    print(f"\n{f'task {named}: ' if named else ''}{base.dataset} / {base.model}: {base.replicas} replicas x batch {base.batch_size}, "
          f"{base.steps} steps, partition {base.partition}, lr {base.lr:g} ({base.lr_schedule}), {seeds}"
          f"{f'; strategy options for every row that takes them: {options}' if options else ''}; "
          f"{layout}; took {time.perf_counter() - started:.0f} s")
    print(format_table(done.rows))
    print(f"\nwrote {out}/results.json and {', '.join(PICTURES)}")
    return 0


def _check_train_args(args) -> None:
    """What `jaxsel train` can refuse before JAX starts."""
    if args.resume and args.out_dir is None and args.checkpoint_dir is None:
        raise UsageError("--resume needs --out RUN_DIR or --checkpoint-dir DIR to know which run to continue")
    if args.resume and args.no_checkpoint:
        raise UsageError("--resume and --no-checkpoint contradict each other; drop one")
    from ..training.config import TrainConfig
    from ..training.declare import flag_of

    for option in ("out_dir", "checkpoint_dir", "data_dir"):
        _check_path_text(getattr(args, option), flag_of(TrainConfig, option))


def _train_config(args, out: str):
    """The TrainConfig of `jaxsel train` and its layout, every check made (run.check_run):
    nothing is created or printed before a usage error."""
    import dataclasses

    from ..training.run import check_run, resumed_settings

    with user_input():
        cfg = config_from_args(args, out_dir=out)
        if args.no_checkpoint:
            cfg = dataclasses.replace(cfg, checkpoint_dir=None, checkpoint_every=None, resume=False)
        cfg = resumed_settings(cfg)
        layout = _layout(cfg)
        check_run(cfg)
    return cfg, layout


def _make_run_dirs(cfg, args, lead: bool, undo: contextlib.ExitStack):
    """Create the run and checkpoint directories (each removed again, by `undo`, if the run
    fails before writing to it); `cfg` with their final names: a default run directory
    gets a name no other run has (`paths.claim_new_dir`)."""
    import dataclasses

    from ..data.paths import claim_new_dir, undo_created

    if lead and args.out_dir is None:   # runs/<strategy>-<time>[-N]
        cfg = dataclasses.replace(cfg, out_dir=claim_new_dir(cfg.out_dir))
        undo.enter_context(undo_created(cfg.out_dir, True))
    elif lead and _ensure_writable(cfg.out_dir):
        undo.enter_context(undo_created(cfg.out_dir, True))
    root = cfg.checkpoint_root()
    if root is not None and _ensure_writable(str(root), "--checkpoint-dir", default=args.checkpoint_dir is None):
        undo.enter_context(undo_created(root, True))
    return cfg


def cmd_train(args) -> int:
    from ..training import early_stop

    _check_train_args(args)
    watchdog = _start_processes(args)
    _start_backend()
    import jax

    from ..training.train import train

    lead = jax.process_index() == 0
    out = args.out_dir if args.out_dir is not None else _default_out(args.strategy)
    try:
        cfg, layout = _train_config(args, out)
        early_stop.check()   # a Ctrl-C so far: stop before anything is created
        with contextlib.ExitStack() as undo:
            def make_dirs(cfg):   # every check passed and the run is built: create, then say where
                cfg = _make_run_dirs(cfg, args, lead, undo)
                if lead:
                    print(f"run directory: {cfg.out_dir}", flush=True)
                    if args.task is not None:   # train's own defaults are no task
                        from .task_flag import task_line

                        print(task_line(cfg, args), flush=True)
                    print(f"layout: {layout}", flush=True)
                return cfg

            result = train(cfg, checked=True, make_dirs=make_dirs)   # _train_config ran run.check_run
    except BaseException as err:
        if watchdog is not None:   # never leave the other processes waiting in a collective
            from ..training.distributed import leave_after_error

            leave_after_error(watchdog, err, f"jaxsel {args.command}")
        raise
    if watchdog is not None:
        watchdog.finish()
    if lead:
        _print_summary(result.final)
    return 0


def _print_summary(final: dict) -> None:
    """The run's final figures, 4 significant digits, no negative zeros."""
    from ..training.numbers import significant

    for k, v in final.items():
        if k != "projection":
            shown = significant(v) if isinstance(v, float) else v
            if isinstance(v, dict) and "per_replica" in v:   # replica_accuracy, replica_loss
                shown = f"mean {significant(v['mean'])}, min {significant(v['min'])}, max {significant(v['max'])}"
            print(f"{k:>22}: {shown}")
    p = final["projection"]
    print(f"{'projected on':>22}: {p['network']}, stragglers {p['stragglers']} (compute "
          f"{significant(p['compute'])} s, waiting {significant(max(p['waiting'], 0.0))} s, communication "
          f"{significant(p['communication'])} s)")


def cmd_datasets(args) -> int:
    """List every known dataset and whether it is ready in the data dir."""
    from ..data.sources import KNOWN, resolve_data_dir, status

    root = resolve_data_dir(args.data_dir)
    print(f"data dir: {root}")
    print(f"{'name':<14} {'kind':<13} {'TFDS name':<13} status")
    for name, spec in sorted(KNOWN.items(), key=lambda kv: (kv[1].builder is None, kv[0])):
        line = f"{name:<14} {spec.kind:<13} {spec.source_name:<13} {status(name, root)}"
        print(line + (f"\n{'':<42}{spec.description}" if args.verbose and spec.description else ""))
    from ..data.prepare import SOURCES

    print("\n`jaxsel prepare NAME --from PATH` needs no TensorFlow; PATH is:")
    for name, what in SOURCES.items():
        print(f"  {name:<14} {what}")
    return 0


def cmd_prepare(args) -> int:
    """Prepare a dataset in the data dir: a real one from the user's files (no TensorFlow,
    no network), an embedded one offline; safe to run in several processes at once."""
    from ..data.prepare import prepare

    prepare(args.name, args.source, args.data_dir, progress=not args.no_progress)
    return 0


def cmd_bench(args) -> int:
    """Step overheads side by side: table on stdout, JSON to --json."""
    shape = input_shape(args.input_shape)
    _start_jax(args.replicas or 1)
    _start_backend()
    from ..analysis.bench import TARGET, missed_targets, run_bench

    if args.json:
        _ensure_writable(str(Path(args.json).parent or "."), "--json")
    with user_input():
        result = run_bench(args.model, args.replicas, args.batch, args.repeats, args.warmup, args.json,
                           size=args.size, input_shape=shape, log_every=args.log_every,
                           dispatch_steps=args.dispatch_steps, devices=args.devices, platform=args.platform,
                           dtype=args.dtype, packed=args.packed, hlo=args.hlo, local_replicas=args.local_replicas)
    missed = missed_targets(result)
    print(f"\ntargets: overhead ratios <= {TARGET}; {'all met' if not missed else 'missed: ' + ', '.join(missed)}")
    if args.json:
        print(f"wrote {args.json}")
    return 0


def input_shape(text: str | None) -> tuple[int, ...] | None:
    """`--input-shape HxWxC` (or any number of dimensions), each an integer >= 1."""
    if text is None:
        return None
    try:
        shape = tuple(int(d) for d in text.split("x"))
    except ValueError:
        shape = ()
    if not shape or not all(1 <= d <= INT32_MAX for d in shape):
        raise UsageError(f"--input-shape {text!r}: each dimension must be an integer >= 1 (and <= {INT32_MAX}), "
                         f"written HxWxC, e.g. 32x32x3")
    return shape


def cmd_report(args) -> int:
    """Accuracy against measured and projected time for one run or a compare dir; a
    compare or frontier dir's own tables and pictures made again from its records."""
    from ..analysis.job_report import report_job
    from ..analysis.report import report

    with user_input():
        remade = report_job(Path(args.run_dir))
    if remade is not None:
        print(remade[1] + "\n")
        if remade[0] == "frontier":   # its runs are the frontier's points, not curves to overlay
            return 0
    with user_input():
        text = report(args.run_dir, networks=args.networks.split(","), stragglers=args.stragglers,
                      compute_s=args.compute_s, out=args.out, gpus_per_host=args.gpus_per_host,
                      intra_network=args.intra_network, target=args.target)
    print(text)
    return 0


def _overrides_note(command: str, overrides: dict) -> str:
    """The sentence of `command`'s help that names its defaults other than TrainConfig's."""
    from ..training.config import TrainConfig
    from ..training.declare import default_of, flag_name

    shown = ", ".join(f"{flag_name(k)} {v}" for k, v in overrides.items() if v != default_of(TrainConfig, k))
    return f"`jaxsel {command}`'s own defaults (a TrainConfig's differ): {shown}."


def _add_compare(sub) -> None:
    from .strategy_args import HelpFormatter, add_strategy_args, strategy_epilog
    from .task_flag import add_task_flag

    p = sub.add_parser("compare", help="train several strategies side by side (the default job)",
                       description=f"The default job: {DEFAULT_TASK_NOTE} {_overrides_note('compare', DEFAULT_TASK)}",
                       formatter_class=HelpFormatter, epilog=strategy_epilog())
    add_training_args(p, "compare", DEFAULT_TASK)
    add_task_flag(p)
    p.add_argument("--strategies", default=DEFAULT_STRATEGIES, metavar="ENTRIES",
                   help="comma-separated entries, each a strategy name or a variant NAME:KEY=VALUE[:KEY=VALUE...] "
                        "(e.g. bsp,localsgd:period=8,selsync,selsync:delta=0.05); global strategy flags are "
                        "defaults for every entry that takes them, an entry's own options win")
    p.add_argument("--seeds", type=int, default=3, metavar="K",
                   help="train every entry with seeds --seed .. --seed+K-1; tables show mean ± std")
    p.add_argument("--match-budget", action=argparse.BooleanOptionalAction, default=None,
                   help="add, for every row whose sync pattern is adaptive (selsync, ...), local SGD with as many "
                        "syncs, and say whether the row beat it beyond the seed spread (default: on)")
    p.add_argument("--target", default="99%", metavar="ACC|PCT%",
                   help="time-to-accuracy target: an accuracy (0.6) or a share of BSP's final accuracy (99%%)")
    p.add_argument("--out", default=None, help="run directory (default runs/compare-<time>)")
    p.add_argument("--resume", dest="resume_job", action="store_true",
                   help="continue the comparison stopped in --out (same settings): its finished runs are loaded, "
                        "the rest run")
    p.add_argument("--config", default=None, metavar="FILE",
                   help="settings from a TOML/JSON/YAML file (TrainConfig fields, strategies, ...); flags typed "
                        "override it")
    add_strategy_args(p)
    p.set_defaults(func=cmd_compare)


def _kit():
    """The pieces `jaxsel frontier` and `jaxsel calibrate` share with compare."""
    from .frontier import Kit

    return Kit(add_training_args, config_from_args, _start_jax, _layout, _ensure_writable, _default_out,
               user_input, UsageError, DEFAULT_TASK, DEFAULT_TASK_NOTE, _overrides_note)


def _add_frontier(sub) -> None:
    """`jaxsel frontier` (cli/frontier.py)."""
    from .frontier import add_frontier

    add_frontier(sub, _kit())


def _add_calibrate(sub) -> None:
    """`jaxsel calibrate` (cli/calibrate.py)."""
    from .calibrate import add_calibrate

    add_calibrate(sub, _kit())


def _add_train(sub) -> None:
    from .strategy_args import HelpFormatter, add_strategy_args, strategy_epilog
    from .task_flag import add_task_flag

    p = sub.add_parser("train", help="train one strategy", formatter_class=HelpFormatter,
                       description=_overrides_note("train", TRAIN_DEFAULTS) + " " + TRAIN_DEFAULTS_NOTE,
                       epilog=strategy_epilog())
    add_training_args(p, "train", TRAIN_DEFAULTS)
    add_task_flag(p)
    add_run_control_args(p)
    p.add_argument("--config", default=None, metavar="FILE",
                   help="settings from a TOML/JSON/YAML file (TrainConfig fields); flags typed override it; "
                        "RUN_DIR/config.json reproduces that run")
    add_strategy_args(p)
    p.set_defaults(func=cmd_train)


def _add_data_commands(sub) -> None:
    """`jaxsel datasets` and `jaxsel prepare`."""
    p = sub.add_parser("datasets", help="list known datasets and which are prepared locally")
    p.add_argument("--data-dir", default=None, help="TFDS data dir (default ~/.cache/jaxsel/tfds)")
    p.add_argument("-v", "--verbose", action="store_true", help="also describe each dataset")
    p.set_defaults(func=cmd_datasets)

    p = sub.add_parser("prepare", help="write a dataset into the data dir from local files (no TensorFlow)")
    p.add_argument("name", help="dataset: cifar10, cifar100, mnist, fashion_mnist, imagenet2012, cars196, "
                                "or an embedded one (digits, mnist1d)")
    p.add_argument("--from", dest="source", default=None, metavar="PATH",
                   help="the files you have: a CIFAR python tarball, a folder of MNIST IDX files, "
                        "or an image folder (SPLIT/CLASS/*.jpg)")
    p.add_argument("--data-dir", default=None, help="TFDS data dir (default ~/.cache/jaxsel/tfds)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_prepare)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jaxsel", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")

    _add_compare(sub)
    _add_frontier(sub)
    _add_calibrate(sub)
    _add_train(sub)
    _add_data_commands(sub)
    p = sub.add_parser("bench", help="step overheads: SelSync vs local/BSP, BSP vs hand-written, async dispatch")
    p.add_argument("--model", default="mlp", help="model of jaxsel.models fed random data (mlp, cnn, resnet18, ...)")
    p.add_argument("--replicas", type=int, default=None,
                   help="model replicas (default: one per device of the platform, the accelerator's if any)")
    p.add_argument("--platform", default=None, help="this platform's devices (default: the accelerator if any)")
    p.add_argument("--devices", type=int, default=None, help="use the first N devices; replicas are packed on them")
    p.add_argument("--batch", type=int, default=None, help="examples per replica (default: the size's)")
    p.add_argument("--repeats", type=int, default=None, help="timed steps per variant (medians)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps per variant first")
    p.add_argument("--size", choices=("default", "tiny"), default="default", help="defaults of the above")
    p.add_argument("--input-shape", default=None, metavar="HxWxC", help="e.g. 32x32x3 (default: the size's)")
    p.add_argument("--log-every", type=int, default=None, help="metric reads of the lazy dispatch loop (100)")
    p.add_argument("--dispatch-steps", type=int, default=None, help="steps per async-dispatch loop")
    p.add_argument("--dtype", default="fp32",
                   help="fp32, or bf16: bf16 compute, fp32 params (jaxsel.analysis.precision)")
    p.add_argument("--packed", type=int, default=8, metavar="N",
                   help="replicas of the packed row, all on one device (0: no packed row)")
    p.add_argument("--hlo", action="store_true", help="also count each variant's compiled fusions and ops")
    p.add_argument("--local-replicas", default="auto", metavar="LOOP",
                   help="how jaxsel's steps compute a device's replicas: auto, vmap, map, unroll, matmul "
                        "(vmap: a GPU's path for one replica per device, on any platform)")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the result as JSON")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("report", help="plot accuracy against measured and projected time of a run; remake a "
                                      "compare or frontier dir's tables and pictures from its records")
    p.add_argument("run_dir", help="a `jaxsel train` run dir, or a `jaxsel compare` or `jaxsel frontier` dir")
    p.add_argument("--networks", default="10gbe", help="comma-separated network presets to project onto")
    p.add_argument("--stragglers", default=None, metavar="SPEC", help="straggler model of the projections")
    p.add_argument("--compute-s", type=float, default=None, metavar="SECONDS",
                   help="per-step compute time (default: each run's measured step time)")
    p.add_argument("--gpus-per-host", type=int, default=1, metavar="K",
                   help="project onto hosts of K replicas, --networks between them (default 1: one network)")
    p.add_argument("--intra-network", default="nvlink", metavar="PRESET",
                   help="network inside a host with --gpus-per-host > 1 (nvlink, pcie, ...)")
    p.add_argument("--target", type=float, default=None, metavar="ACC",
                   help="also show each run's projected time to this test accuracy")
    p.add_argument("--out", default=None, help="picture path: a file (no suffix: .png), or a directory for "
                                                "DIR/report.png (default RUN_DIR/report.png)")
    p.set_defaults(func=cmd_report)
    from .once import refuse_repeats

    return refuse_repeats(parser)   # an option given twice is an error, not its last value


def run(argv: list[str] | None, startup) -> int:
    """The command line under the start-up signal handler `startup` (installed by `jaxsel.cli.main`)."""
    from ..training.early_stop import StoppedEarly, check

    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        from .backend import check_cpu_device_count

        check_cpu_device_count()   # JAX reads it when first imported (by the plugins' strategies)
        from .strategy_args import load_plugins

        load_plugins(argv)   # registered names must be known before the parser lists them
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command != "train":
            startup.release()   # other commands leave Ctrl-C to Python (KeyboardInterrupt)
        check()
    except ValueError as err:
        print(f"jaxsel: error: {one_line(err)}", file=sys.stderr)
        return 2
    except StoppedEarly as stop:
        print(f"jaxsel: {stop}", file=sys.stderr)
        return stop.exit_code
    except KeyboardInterrupt:   # a second Ctrl-C
        print("jaxsel: interrupted", file=sys.stderr)
        return 130
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        if getattr(args, "config", None):
            _apply_config_file(args, argv)
        _apply_task(args, argv)
        multihost_train = args.command == "train" and (args.coordinator or args.distributed == "auto")
        if multihost_train:
            from ..training.supervisor import available

            if available():
                return _supervised_train(args, argv)
        return int(args.func(args) or 0)
    except _user_errors() as err:
        print(f"jaxsel {args.command}: error: {one_line(err)}", file=sys.stderr)
        return 2
    except (_interrupted(), StoppedEarly) as stop:  # SIGTERM -> 143, SIGINT -> 130 (after saving)
        print(f"jaxsel {args.command}: {stop}", file=sys.stderr)
        return stop.exit_code
    except _run_faults() as err:  # NaN/inf, unreadable checkpoints, a lost peer: one line, exit 1
        print(f"jaxsel {args.command}: error: {one_line(err)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"jaxsel {args.command}: interrupted", file=sys.stderr)
        return 130
    except OSError as err:
        if err.errno not in FS_ERRNOS:
            return _unexpected(args.command)
        where = f": {err.filename}" if err.filename else ""
        print(f"jaxsel {args.command}: error: {err.strerror or err}{where}", file=sys.stderr)
        return 2
    except Exception:  # noqa: BLE001 - a bug: its traceback once, and where to send it
        return _unexpected(args.command)


def _apply_config_file(args, argv: list[str]) -> None:
    """--config FILE: its settings as if typed before the flags (training/config_file.py)."""
    from ..training.config_file import apply_to_args, command_keys, explicit_dests, load_settings, subcommand

    from .strategy_args import add_strategy_args

    training = argparse.ArgumentParser(add_help=False)
    add_training_args(training, args.command)
    add_strategy_args(training)
    settings = load_settings(args.config, command_keys(subcommand(build_parser(), args.command), training))
    args.config_rest = apply_to_args(args, settings, explicit_dests(build_parser(), argv))
    args.config_set = set(settings)   # a --task leaves these as the file set them


def _apply_task(args, argv: list[str]) -> None:
    """--task NAME: its settings where neither a typed flag nor --config set the field."""
    if getattr(args, "task", None) is None:
        return
    from ..training.config_file import explicit_dests

    from .task_flag import apply_task

    apply_task(args, explicit_dests(build_parser(), argv) | getattr(args, "config_set", set()))


def one_line(err: BaseException) -> str:
    """An error's message on one line: some carry a library's multi-line detail (a tarball
    that is not one lists every compression tried)."""
    return "; ".join(line.strip() for line in str(err).splitlines() if line.strip())


def _unexpected(command: str) -> int:
    import traceback

    traceback.print_exc()
    print(f"jaxsel {command}: error: {REPORT_BUGS}", file=sys.stderr, flush=True)
    return 1

