"""Superstep aggregation study (student slides): ResNet-50 on Stanford Cars, 8 replicas.

Replicas train on disjoint shards and synchronise every E epochs (E = 30, 10, 5, 3 of a
30-epoch run) with the aggregate max, min, median or mean of their parameters. The slides
report all aggregators fitting alike, more syncs approaching serial accuracy, and 8 GPUs
3.73x faster than 1. Pick one cell of the grid with `--opt epochs=E --opt aggregator=A`;
`--grid` runs all 16. Assumed: SGD lr 0.01, momentum 0.9, batch 32 per replica, 224x224.
"""
import dataclasses
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments._runner import Experiment, main, steps_for
from jaxsel.train import TrainConfig

PERIODS = (30, 10, 5, 3)
AGGREGATORS = ("max", "min", "median", "mean")


def full(data_dir=None) -> TrainConfig:
    return TrainConfig(dataset="cars196", data_dir=data_dir, model="resnet50", strategy="superstep",
                       strategy_options={"epochs": 10, "aggregator": "mean"}, replicas=8,
                       batch_size=32, steps=steps_for(30, 8_144, 32, replicas=8), optimizer="sgd",
                       lr=0.01, momentum=0.9, weight_decay=1e-4, partition="disjoint",
                       eval_every=steps_for(1, 8_144, 32, replicas=8), log_every=10,
                       loader_workers=8, prefetch=4)


def tiny(data_dir=None) -> TrainConfig:
    """mnist1d and the MLP, 4 replicas on disjoint shards, a median superstep every
    quarter epoch (a 60-step run then syncs four times)."""
    return TrainConfig(dataset="mnist1d", data_dir=data_dir, model="mlp", strategy="superstep",
                       strategy_options={"epochs": 0.25, "aggregator": "median"}, replicas=4,
                       batch_size=16, steps=60, optimizer="sgd", lr=0.05, momentum=0.9,
                       partition="disjoint", eval_every=60, log_every=10)


def grid(base: TrainConfig, tiny: bool = False) -> list[TrainConfig]:
    """The slides' 16 runs: every sync period x every aggregator (tiny runs last about one
    epoch instead of 30, so their periods shrink by the same factor)."""
    scale = 1 / 30 if tiny else 1.0
    return [dataclasses.replace(base, strategy_options={"epochs": e * scale, "aggregator": a})
            for e in PERIODS for a in AGGREGATORS]


EXPERIMENT = Experiment("superstep_resnet50_cars196", __doc__.split("\n\n")[0], full, tiny,
                        baselines=("bsp", "localsgd"), grid=grid)

if __name__ == "__main__":
    main(EXPERIMENT)
