"""The `jaxsel` command: train, compare (and the subcommands other modules register).

Bad input exits with code 2 and one line naming the value and what is allowed.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

DEFAULT_STRATEGIES = "bsp,localsgd,selsync"


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
    from .checkpoint import CheckpointMismatch
    from .config import ConfigError
    from .data.formats import FormatError
    from .data.prepare import CannotPrepare
    from .data.sources import DatasetNotPrepared
    from .paths import UnusablePath

    return (UsageError, ConfigError, CheckpointMismatch, DatasetNotPrepared, UnusablePath, FormatError,
            CannotPrepare)


def _run_faults() -> tuple[type, ...]:
    """Training faults reported as one line with exit code 1 (imported only when raised)."""
    from .checkpoint import CheckpointError
    from .distributed import PeerLostError
    from .faults import NonFiniteError

    return (NonFiniteError, CheckpointError, PeerLostError)


def _interrupted() -> type:
    from .faults import TrainingInterrupted

    return TrainingInterrupted


def add_training_args(p: argparse.ArgumentParser, *, steps: int = 600) -> None:
    g = p.add_argument_group("training")
    g.add_argument("--dataset", default="digits", help="dataset name (`jaxsel datasets` lists them)")
    g.add_argument("--data-dir", default=None, help="TFDS data dir (default ~/.cache/jaxsel/tfds)")
    g.add_argument("--model", default="mlp", help="model name (mlp, cnn, ...)")
    g.add_argument("--replicas", type=int, default=8,
                   help="model replicas, packed k per device when there are fewer devices (1..M or a multiple of M)")
    g.add_argument("--platform", default=None,
                   help="put the replicas on this platform's devices (e.g. cpu; default: the accelerator if any)")
    g.add_argument("--devices", type=int, default=None, help="use the first N devices (default: all)")
    g.add_argument("--local-replicas", choices=("auto", "vmap", "unroll", "map"), default="auto",
                   help="a device's packed replicas: batched (vmap), k plain copies (unroll), a loop (map); "
                        "auto: unroll on CPU, vmap elsewhere")
    g.add_argument("--batch-size", type=int, default=16, help="per-replica batch size")
    g.add_argument("--global-batch-size", type=int, default=None,
                   help="total batch over all replicas (instead of --batch-size; divisible by --replicas)")
    g.add_argument("--steps", type=int, default=steps)
    g.add_argument("--optimizer", default="sgd", help="sgd, adam or adamw")
    g.add_argument("--lr", type=float, default=0.05)
    g.add_argument("--momentum", type=float, default=0.9)
    g.add_argument("--weight-decay", type=float, default=0.0)
    g.add_argument("--clip-norm", type=float, default=None)
    g.add_argument("--partition", default="seldp",
                   help="data partitioning (seldp, disjoint, label_skew, dirichlet)")
    g.add_argument("--partition-opt", action="append", metavar="KEY=VALUE",
                   help="partitioner option, e.g. classes_per_replica=1 or alpha=0.5 (dirichlet)")
    g.add_argument("--inject", default=None, metavar="ALPHA,BETA",
                   help="SelSync data injection: ceil(ALPHA*C) foreign classes, BETA*b*N/C samples each")
    g.add_argument("--dataset-opt", action="append", metavar="KEY=VALUE",
                   help="dataset option: seq_len, in_memory, records_per_window, num_samples, seed")
    g.add_argument("--augment", choices=("auto", "on", "off"), default="auto",
                   help="on-device random crop + flip (auto: the dataset's default)")
    g.add_argument("--eval-examples", type=int, default=None, help="evaluate on the first N test examples")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--eval-every", type=int, default=50)
    g.add_argument("--log-every", type=int, default=10)
    g.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    c = p.add_argument_group("projected wall-clock (logged as projected_time_s; see `jaxsel report`)")
    c.add_argument("--project-network", default="10gbe",
                   help="network preset of the projection: nvlink, 100gbe, 25gbe, 10gbe, 1gbe")
    c.add_argument("--project-stragglers", default=None, metavar="SPEC",
                   help="straggler model, e.g. fixed:factor=2,replicas=0 or lognormal:sigma=0.2")
    c.add_argument("--project-compute-s", type=float, default=None, metavar="SECONDS",
                   help="per-step compute time to project with (default: this run's measured step time)")
    s = p.add_argument_group("strategy options (each strategy takes the ones it knows)")
    s.add_argument("--period", type=int, default=None, help="local SGD / FedAvg sync period (steps)")
    s.add_argument("--delta", type=float, default=None, help="SelSync significance threshold")
    s.add_argument("--window", type=int, default=None, help="SelSync EWMA window")
    s.add_argument("--alpha", type=float, default=None, help="SelSync EWMA smoothing")
    s.add_argument("--aggregator", default=None, help="mean, weighted, median, min, max, trimmed:K, random")
    s.add_argument("--opt", action="append", metavar="KEY=VALUE", help="any other strategy option")


def config_from_args(args, strategy: str, out_dir: str | None):
    from .config import TrainConfig, parse_options

    options = {"period": args.period, "delta": args.delta, "window": args.window,
               "alpha": args.alpha, "aggregator": args.aggregator, **parse_options(args.opt)}
    partition_options = parse_options(getattr(args, "partition_opt", None), "--partition-opt")
    if getattr(args, "inject", None):
        try:
            alpha, beta = (float(v) for v in args.inject.split(","))
        except ValueError:
            raise UsageError(f"--inject expects ALPHA,BETA (two numbers), got {args.inject!r}") from None
        partition_options["injection"] = (alpha, beta)
    return TrainConfig(
        dataset=args.dataset, model=args.model, strategy=strategy,
        strategy_options={k: v for k, v in options.items() if v is not None},
        replicas=args.replicas, platform=args.platform, devices=args.devices, local_replicas=args.local_replicas,
        batch_size=_per_replica_batch(args), steps=args.steps,
        optimizer=args.optimizer, lr=args.lr, momentum=args.momentum,
        weight_decay=args.weight_decay, clip_norm=args.clip_norm, partition=args.partition,
        seed=args.seed, eval_every=args.eval_every, log_every=args.log_every,
        data_dir=args.data_dir, out_dir=out_dir, progress=not args.no_progress,
        partition_options=partition_options,
        dataset_options=parse_options(getattr(args, "dataset_opt", None), "--dataset-opt"),
        augment={"on": True, "off": False}.get(getattr(args, "augment", "auto")),
        eval_examples=getattr(args, "eval_examples", None),
        project_network=args.project_network, project_stragglers=args.project_stragglers,
        project_compute_s=args.project_compute_s,
    )


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
    """Checkpoints, resume, fault handling and multi-host options (`jaxsel train`)."""
    g = p.add_argument_group("checkpoints and faults")
    g.add_argument("--checkpoint-dir", default=None,
                   help="checkpoint directory (default checkpoints/<name of the run directory>)")
    g.add_argument("--checkpoint-every", type=int, default=100,
                   help="steps between asynchronous checkpoints (also saved at the end and on SIGTERM/SIGINT)")
    g.add_argument("--keep", type=int, default=3, help="newest checkpoints to keep")
    g.add_argument("--no-checkpoint", action="store_true", help="write no checkpoints")
    g.add_argument("--resume", action="store_true",
                   help="continue from the newest readable checkpoint (needs --out or --checkpoint-dir)")
    g.add_argument("--nonfinite", choices=("stop", "skip"), default="stop",
                   help="NaN/inf loss or gradient: stop (keep the last good checkpoint) or skip the step")
    m = p.add_argument_group("multi-host (jax.distributed; every process runs the same command)")
    m.add_argument("--coordinator", default=None, metavar="HOST:PORT", help="process 0's address")
    m.add_argument("--num-processes", type=int, default=None, help="number of processes")
    m.add_argument("--process-id", type=int, default=None, help="this process's index, 0..P-1")
    m.add_argument("--distributed", choices=("off", "auto"), default="off",
                   help="auto: let jax.distributed detect the cluster (SLURM, Open MPI, TPU, ...)")
    m.add_argument("--peer-timeout", type=float, default=60.0,
                   help="seconds without a heartbeat before a peer counts as dead and this process exits")


def _start_processes(args):
    """Simulated CPU devices and, for a multi-host run, jax.distributed plus the peer
    watchdog; all before JAX starts its backends. Returns the watchdog (or None)."""
    from . import distributed

    auto = args.distributed == "auto"
    _check_layout(args)
    if not (auto or args.coordinator):
        _start_jax(args.replicas)
        return None
    if args.num_processes and "JAX_NUM_CPU_DEVICES" not in os.environ:
        from .parallel import request_cpu_devices

        request_cpu_devices(max(1, args.replicas // args.num_processes))  # CPU hosts only
    with user_input():   # --distributed auto found no cluster
        return distributed.start(args.coordinator, args.num_processes, args.process_id, auto=auto,
                                 peer_timeout=args.peer_timeout)


def _check_layout(args) -> None:
    from .distributed import check_process_layout

    with user_input():
        check_process_layout(args.coordinator, args.num_processes, args.process_id,
                             args.distributed == "auto", args.peer_timeout)


def _supervised_train(args, argv: list[str]) -> int:
    """A multi-host `train` runs in a child process that reports a gloo abort clearly."""
    from . import supervisor

    _check_layout(args)   # usage errors from here, before a child starts
    who = (f"process {args.process_id} of {args.num_processes}" if args.process_id is not None
           else "this process")
    return supervisor.supervise([sys.executable, "-m", "jaxsel.cli", *argv], who)


def _default_out(prefix: str) -> str:
    return str(Path("runs") / f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}")


def _ensure_writable(path: str, option: str = "--out", what: str = "output dir") -> None:
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
        probe = p / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise UsageError(f"{what} {path!r} is not writable ({err.strerror}); choose another with {option}")


def _start_jax(replicas: int) -> None:
    """Give a CPU-only host enough simulated devices before JAX initialises."""
    from .parallel import request_cpu_devices

    request_cpu_devices(max(8, replicas))


def _layout(cfg) -> str:
    """The true layout line of a run's config; replicas that do not fit: a usage error."""
    from .parallel import data_mesh, describe_layout

    return describe_layout(data_mesh(cfg.replicas, devices=cfg.devices, platform=cfg.platform))


def cmd_compare(args) -> int:
    _start_jax(args.replicas)
    from .compare import compare, format_table

    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    from .strategies.registry import STRATEGIES

    for s in strategies:
        if s not in STRATEGIES:
            raise UsageError(f"unknown strategy {s!r}; choose from {', '.join(STRATEGIES)}")
    out = args.out or _default_out("compare")
    import dataclasses

    from .config import check_config

    with user_input():
        base = config_from_args(args, strategies[0], None)
        for s in strategies:
            check_config(dataclasses.replace(base, strategy=s))
        layout = _layout(base)
    _ensure_writable(out)
    print(f"run directory: {out}", flush=True)
    print(f"layout: {layout}", flush=True)
    rows = compare(base, strategies, out)
    print()
    print(f"{base.dataset} / {base.model}: {base.replicas} replicas x batch {base.batch_size}, "
          f"{base.steps} steps; {layout}")
    print(format_table(rows))
    print(f"\nwrote {out}/results.json and {out}/comparison.png")
    return 0


def cmd_train(args) -> int:
    import dataclasses

    if args.resume and not (args.out or args.checkpoint_dir):
        raise UsageError("--resume needs --out RUN_DIR or --checkpoint-dir DIR to know which run to continue")
    if args.resume and args.no_checkpoint:
        raise UsageError("--resume and --no-checkpoint contradict each other; drop one")
    watchdog = _start_processes(args)
    import jax

    from .train import train

    lead = jax.process_index() == 0
    out = args.out or _default_out(args.strategy)
    with user_input():
        cfg = config_from_args(args, args.strategy, out)
    if not args.no_checkpoint:
        cfg = dataclasses.replace(cfg, checkpoint_dir=args.checkpoint_dir, checkpoint_every=args.checkpoint_every,
                                  keep=args.keep, resume=args.resume)
    cfg = dataclasses.replace(cfg, nonfinite=args.nonfinite)
    try:
        from .config import check_config
        from .run import check_paths

        with user_input():
            check_config(cfg)
            check_paths(cfg)
            layout = _layout(cfg)
        if lead:
            _ensure_writable(out)
        if cfg.checkpoint_root() is not None:
            _ensure_writable(str(cfg.checkpoint_root()), "--checkpoint-dir", "checkpoint dir")
        if lead:
            print(f"run directory: {out}", flush=True)
            print(f"layout: {layout}", flush=True)
        result = train(cfg)
    except BaseException as err:
        if watchdog is not None:   # never leave the other processes waiting in a collective
            from .distributed import leave_after_error

            leave_after_error(watchdog, err, f"jaxsel {args.command}")
        raise
    if watchdog is not None:
        watchdog.finish()
    if lead:
        for k, v in result.final.items():
            if k != "projection":
                print(f"{k:>22}: {v}")
        p = result.final["projection"]
        print(f"{'projected on':>22}: {p['network']}, stragglers {p['stragglers']} (compute "
              f"{p['compute']:.2f} s, waiting {p['waiting']:.2f} s, communication {p['communication']:.2f} s)")
    return 0


def cmd_datasets(args) -> int:
    """List every known dataset and whether it is ready in the data dir."""
    from .data.sources import KNOWN, resolve_data_dir, status

    root = resolve_data_dir(args.data_dir)
    print(f"data dir: {root}")
    print(f"{'name':<14} {'kind':<13} {'TFDS name':<13} status")
    for name, spec in sorted(KNOWN.items(), key=lambda kv: (kv[1].builder is None, kv[0])):
        line = f"{name:<14} {spec.kind:<13} {spec.source_name:<13} {status(name, root)}"
        print(line + (f"\n{'':<42}{spec.description}" if args.verbose and spec.description else ""))
    from .data.prepare import SOURCES

    print("\n`jaxsel prepare NAME --from PATH` needs no TensorFlow; PATH is:")
    for name, what in SOURCES.items():
        print(f"  {name:<14} {what}")
    return 0


def cmd_prepare(args) -> int:
    """Prepare a dataset in the data dir: a real one from the user's files (no TensorFlow,
    no network), an embedded one offline; safe to run in several processes at once."""
    from .data.prepare import prepare

    prepare(args.name, args.source, args.data_dir, progress=not args.no_progress)
    return 0


def cmd_bench(args) -> int:
    """Step overheads side by side: table on stdout, JSON to --json."""
    _start_jax(args.replicas)
    from .bench import RATIOS, run_bench

    with user_input():
        shape = tuple(int(d) for d in args.input_shape.split("x")) if args.input_shape else None
    if args.json:
        _ensure_writable(str(Path(args.json).parent or "."), "--json", "JSON dir")
    with user_input():
        result = run_bench(args.model, args.replicas, args.batch, args.repeats, args.warmup, args.json,
                           size=args.size, input_shape=shape, log_every=args.log_every,
                           dispatch_steps=args.dispatch_steps, devices=args.devices, platform=args.platform)
    targets = {k: 1.02 for k in RATIOS if k != "async_dispatch"}
    missed = [f"{k}={result['ratios'][k]:.3f}" for k, t in targets.items() if result["ratios"][k] > t]
    print(f"\ntargets: overhead ratios <= 1.02; {'all met' if not missed else 'missed: ' + ', '.join(missed)}")
    if args.json:
        print(f"wrote {args.json}")
    return 0


def cmd_report(args) -> int:
    """Accuracy against measured and projected time for one run or a compare dir."""
    from .report import report

    with user_input():
        text = report(args.run_dir, networks=args.networks.split(","), stragglers=args.stragglers,
                      compute_s=args.compute_s, out=args.out)
    print(text)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jaxsel", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")

    p = sub.add_parser("compare", help="train several strategies side by side (the default job)")
    add_training_args(p)
    p.add_argument("--strategies", default=DEFAULT_STRATEGIES, help="comma-separated strategy names")
    p.add_argument("--out", default=None, help="run directory (default runs/compare-<time>)")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("train", help="train one strategy")
    add_training_args(p)
    add_run_control_args(p)
    p.add_argument("--strategy", default="selsync")
    p.add_argument("--out", default=None, help="run directory (default runs/<strategy>-<time>)")
    p.set_defaults(func=cmd_train)

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

    p = sub.add_parser("bench", help="step overheads: SelSync vs local/BSP, BSP vs hand-written, async dispatch")
    p.add_argument("--model", default="mlp", help="model of jaxsel.models fed random data (mlp, cnn, resnet18, ...)")
    p.add_argument("--replicas", type=int, default=8)
    p.add_argument("--platform", default=None, help="this platform's devices (default: the accelerator if any)")
    p.add_argument("--devices", type=int, default=None, help="use the first N devices; replicas are packed on them")
    p.add_argument("--batch", type=int, default=None, help="examples per replica (default: the size's)")
    p.add_argument("--repeats", type=int, default=None, help="timed steps per variant (medians)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps per variant first")
    p.add_argument("--size", choices=("default", "tiny"), default="default", help="defaults of the above")
    p.add_argument("--input-shape", default=None, metavar="HxWxC", help="e.g. 32x32x3 (default: the size's)")
    p.add_argument("--log-every", type=int, default=None, help="metric reads of the lazy dispatch loop (100)")
    p.add_argument("--dispatch-steps", type=int, default=None, help="steps per async-dispatch loop")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the result as JSON")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("report", help="plot accuracy against measured and projected time of a run")
    p.add_argument("run_dir", help="a `jaxsel train` run dir, or a `jaxsel compare` dir of them")
    p.add_argument("--networks", default="10gbe", help="comma-separated network presets to project onto")
    p.add_argument("--stragglers", default=None, metavar="SPEC", help="straggler model of the projections")
    p.add_argument("--compute-s", type=float, default=None, metavar="SECONDS",
                   help="per-step compute time (default: each run's measured step time)")
    p.add_argument("--out", default=None, help="PNG path (default RUN_DIR/report.png)")
    p.set_defaults(func=cmd_report)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    multihost_train = args.command == "train" and (args.coordinator or args.distributed == "auto")
    try:
        if multihost_train:
            from .supervisor import available

            if available():
                return _supervised_train(args, argv)
        return int(args.func(args) or 0)
    except _user_errors() as err:
        print(f"jaxsel {args.command}: error: {err}", file=sys.stderr)
        return 2
    except _interrupted() as stop:  # SIGTERM -> 0, SIGINT -> 130, after saving
        print(f"jaxsel {args.command}: {stop}", file=sys.stderr)
        return stop.exit_code
    except _run_faults() as err:  # NaN/inf, unreadable checkpoints, a lost peer: one line, exit 1
        print(f"jaxsel {args.command}: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
