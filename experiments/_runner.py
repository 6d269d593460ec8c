"""Shared command line for the experiment configs in this folder.

Each experiment module defines an `EXPERIMENT`: a paper-scale `TrainConfig` factory that
reads real data from `--data-dir`, and a `--tiny` factory that runs the same method on an
embedded offline dataset (digits or mnist1d) with a small model in seconds on a CPU.

    python experiments/selsync_resnet101_cifar10.py --data-dir ~/tensorflow_datasets
    python experiments/selsync_resnet101_cifar10.py --tiny
    python experiments/selsync_resnet101_cifar10.py --tiny --strategy bsp   # a baseline
    python experiments/selsync_resnet101_cifar10.py --tiny --strategy fedavg   # as the study ran it
    python experiments/selsync_resnet101_cifar10.py --tiny --steps 100 --opt delta=0.1

The grammar is `jaxsel train`'s: every setting by its flag, a strategy's options in its
entry or `--opt` (`--set FIELD=VALUE`, the last release's, still works, noted).
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from typing import Callable

from jaxsel.cli.common import HelpFormatter
from jaxsel.cli.settings_args import apply_settings, config_from_args, explicit_dests
from jaxsel.cli.strategy_args import add_strategy_args, load_plugins
from jaxsel.cli.task_args import add_task_args
from jaxsel.core.pairs import read_pairs
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


class ExperimentParser(argparse.ArgumentParser):
    """A parser that also records which flags were typed (`args.typed`): those, and only
    those, change the experiment's config (a default `jaxsel train` would use is not the
    experiment's)."""

    reading_typed = False   # inside `explicit_dests`' own parse of the same argv

    def parse_args(self, args=None, namespace=None):
        argv = sys.argv[1:] if args is None else list(args)
        if self.reading_typed:
            return super().parse_args(argv, namespace)
        load_plugins(argv)   # registered names must be known before anything reads them
        parsed = super().parse_args(argv, namespace)
        self.reading_typed = True
        try:
            parsed.typed = explicit_dests(self, argv)
        finally:
            self.reading_typed = False
        parsed.command = "train"
        return parsed


def parser(exp: Experiment) -> argparse.ArgumentParser:
    """The experiment's flags, and every flag of `jaxsel train`'s settings: the same grammar
    (`--steps 100`, `--strategy bsp`, `--opt KEY=VALUE`), each overriding the experiment's
    config where typed."""
    p = ExperimentParser(prog=exp.name, usage="%(prog)s [OPTIONS]", formatter_class=HelpFormatter,
                         description=f"{exp.reproduces} Every `jaxsel train` flag below sets that setting of the "
                                     f"experiment's config; its defaults are the paper-scale config's (--tiny: "
                                     f"the tiny one's).")
    own = p.add_argument_group("the experiment")
    own.add_argument("--tiny", action="store_true", help="embedded data, small model, a few steps (CPU)")
    own.add_argument("--noniid", default=None, nargs="?", const=AUTHORS_INJECTION, metavar="ALPHA,BETA",
                     help="SelSync's non-IID mode: the authors' floor(C/N) classes per replica (the rest dropped) "
                          f"plus data injection (alpha, beta; default {AUTHORS_INJECTION}, their scripts')")
    if exp.grid is not None:
        own.add_argument("--grid", action="store_true", help="run the study's whole sweep")
    own.add_argument("--out", default=None, help="run directory (metrics.jsonl, evals.json, final.json)")
    own.add_argument("--set", action="append", metavar="FIELD=VALUE", help=argparse.SUPPRESS)   # last release's
    groups = add_task_args(p, "train", _defaults(exp))
    add_strategy_args(groups["strategy"])
    return p


def _defaults(exp: Experiment) -> dict:
    """The paper-scale config's settings, for --help."""
    try:
        return dataclasses.asdict(exp.full(None))
    except Exception:   # noqa: BLE001 - a config that needs its data dir: TrainConfig's defaults in --help
        return {}


def config(exp: Experiment, args: argparse.Namespace):
    """The TrainConfig the command line asks for: the experiment's (`--tiny`: the tiny one),
    its baseline's settings for `--strategy` of a baseline, `--noniid`, then every flag typed."""
    cfg = (exp.tiny if args.tiny else exp.full)(args.data_dir)
    settings = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "out_dir"}
    name = args.strategy.split(":")[0] if "strategy" in args.typed else cfg.strategy
    if name != cfg.strategy:   # a baseline: the method's options don't apply
        own = dict(exp.baseline_settings.get(name, {}))
        settings["strategy_options"] = own.pop("strategy_options", {})
        settings.update(own)
    if args.noniid:
        settings["partition"] = "label_skew"
        settings["partition_options"] = {**cfg.partition_options, "classes_per_replica": "floor",
                                         "injection": parse_injection(args.noniid)}
    apply_settings(args, settings, args.typed)
    cfg = dataclasses.replace(config_from_args(args), out_dir=args.out)
    return _old_sets(exp, cfg, args.set)


def _old_sets(exp: Experiment, cfg, pairs):
    """`--set FIELD=VALUE`, the last release's grammar: still applied, each noted."""
    fields = {f.name for f in dataclasses.fields(cfg)}
    changes = {}
    for key, value in read_pairs(pairs, "--set").items():
        if key not in fields:
            raise SystemExit(f"{exp.name}: --set {key}: TrainConfig has no such field")
        print(f"{exp.name}: note: --set is deprecated and goes in the next release; write "
              f"--{key.replace('_', '-')} {value}", file=sys.stderr)
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
