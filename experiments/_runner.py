"""Shared command line for the experiment configs in this folder.

Each experiment module defines an `EXPERIMENT`: a paper-scale `TrainConfig` factory that
reads real data from `--data-dir`, and a `--tiny` factory that runs the same method on an
embedded offline dataset (digits or mnist1d) with a small model in seconds on a CPU.

    python experiments/selsync_resnet101_cifar10.py --data-dir ~/tensorflow_datasets
    python experiments/selsync_resnet101_cifar10.py --tiny
    python experiments/selsync_resnet101_cifar10.py --tiny --strategy bsp   # a baseline
    python experiments/selsync_resnet101_cifar10.py --tiny --strategy fedavg   # as the study ran it
"""
from __future__ import annotations

import argparse
import dataclasses
import math
from typing import Callable

from jaxsel.core.options import parse_kv
from jaxsel.core.parallel import request_cpu_devices
from jaxsel.data.injection import parse_injection


@dataclasses.dataclass(frozen=True)
class Experiment:
    name: str
    reproduces: str                   # the study, its setup and what it claims
    full: Callable                    # data_dir -> TrainConfig at the paper's scale
    tiny: Callable                    # data_dir -> TrainConfig on embedded data
    baselines: tuple[str, ...] = ()   # strategies the study compares against
    grid: Callable | None = None      # (config, tiny) -> configs of a sweep (`--grid`)
    #: a baseline's own settings, as the study ran it: strategy -> TrainConfig changes
    #: ("strategy_options" included), e.g. SelSync's FedAvg every 250 steps
    baseline_settings: dict = dataclasses.field(default_factory=dict)


#: SelSync's scripts' data-injection settings (`alpha=0.25`, `beta=0.25`; injection itself is
#: off in every one of them: `datainjection=0`)
AUTHORS_INJECTION = "0.25,0.25"


def steps_for(epochs: float, examples: int, batch_size: int, replicas: int = 1) -> int:
    """Steps that make `epochs` passes: per replica over its share (`replicas` > 1, for
    disjoint shards) or over the whole set (SelDP: every replica walks everything)."""
    return max(1, math.ceil(epochs * examples / (replicas * batch_size)))


def parser(exp: Experiment) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=exp.name, description=exp.reproduces)
    p.add_argument("--data-dir", default=None, help="TFDS data dir holding the real dataset")
    p.add_argument("--tiny", action="store_true", help="embedded data, small model, a few steps (CPU)")
    p.add_argument("--strategy", default=None, help=f"run a baseline instead ({', '.join(exp.baselines)})")
    p.add_argument("--opt", action="append", metavar="KEY=VALUE", help="strategy option override")
    p.add_argument("--set", action="append", metavar="FIELD=VALUE",
                   help="override any TrainConfig field, e.g. --set steps=100 --set lr=0.05")
    p.add_argument("--noniid", default=None, nargs="?", const=AUTHORS_INJECTION, metavar="ALPHA,BETA",
                   help="SelSync's non-IID mode: the authors' floor(C/N) classes per replica (the rest dropped) "
                        f"plus data injection (alpha, beta; default {AUTHORS_INJECTION}, their scripts')")
    if exp.grid is not None:
        p.add_argument("--grid", action="store_true", help="run the study's whole sweep")
    p.add_argument("--out", default=None, help="run directory (metrics.jsonl, evals.json, final.json)")
    p.add_argument("--no-progress", action="store_true")
    return p


def config(exp: Experiment, args: argparse.Namespace):
    """The TrainConfig the command line asks for."""
    cfg = (exp.tiny if args.tiny else exp.full)(args.data_dir)
    changes: dict = {"out_dir": args.out, "progress": not args.no_progress}
    options = dict(cfg.strategy_options)
    if args.strategy and args.strategy != cfg.strategy:   # a baseline: the method's options don't apply
        own = dict(exp.baseline_settings.get(args.strategy, {}))
        options = own.pop("strategy_options", {})
        changes.update(strategy=args.strategy, **own)
    changes["strategy_options"] = {**options, **parse_kv(args.opt)}
    if args.noniid:
        changes["partition"] = "label_skew"
        changes["partition_options"] = {**cfg.partition_options, "classes_per_replica": "floor",
                                        "injection": parse_injection(args.noniid)}
    fields = {f.name for f in dataclasses.fields(cfg)}
    for key, value in parse_kv(args.set, "--set").items():
        if key not in fields:
            raise SystemExit(f"{exp.name}: --set {key}: TrainConfig has no such field")
        changes[key] = value
    return dataclasses.replace(cfg, **changes)


def train_all(exp: Experiment, args: argparse.Namespace, runs: list) -> list:
    """Train each config in turn, printing its setup and final figures; returns every
    RunResult (a sweep's numbered run directories go under `--out`). Only the last keeps its
    training state: a paper-scale sweep cannot hold 17 ResNet-50s on the devices. Scripts
    with flags of their own (a search, a sweep's summary) call this after `parser` and
    `config`."""
    request_cpu_devices(max(8, *(c.replicas for c in runs)))  # CPU-only hosts: enough simulated devices
    from jaxsel import train

    scale = "tiny (embedded data)" if args.tiny else "paper scale"
    results = []
    for i, cfg in enumerate(runs):
        if len(runs) > 1 and cfg.out_dir:
            cfg = dataclasses.replace(cfg, out_dir=f"{cfg.out_dir}/{i:02d}")
        opts = ", ".join(f"{k}={v}" for k, v in cfg.strategy_options.items())
        print(f"{exp.name} [{scale}]: {cfg.strategy}({opts}) / {cfg.model} on {cfg.dataset}, "
              f"{cfg.replicas} replicas x batch {cfg.batch_size}, {cfg.steps} steps, "
              f"partition {cfg.partition}", flush=True)
        result = train(cfg)
        f = result.final
        print(f"final test accuracy: {f['final_test_accuracy']:.4f}  test loss: {f['final_test_loss']:.4f}  "
              f"train loss: {f['final_train_loss']:.4f}  sync fraction: {f['sync_fraction']:.3f}  "
              f"wall: {f['wall_time_s']:.1f}s", flush=True)
        if results:
            results[-1] = dataclasses.replace(results[-1], state=None)
        results.append(result)
    return results


def main(exp: Experiment, argv: list[str] | None = None):
    """Parse the command line, train, print the final figures; returns the last RunResult."""
    args = parser(exp).parse_args(argv)
    cfg = config(exp, args)
    runs = exp.grid(cfg, args.tiny) if getattr(args, "grid", False) else [cfg]
    return train_all(exp, args, runs)[-1]
