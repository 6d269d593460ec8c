"""Sync-Switch (Li et al., ICDCS'21): ResNet-32 on CIFAR-10, 8 workers.

Offline policy: BSP for the first 5 % of training, then the asynchronous protocol
(jaxsel emulates ASP's staleness in lock-step, s = N - 1). Paper: 91.7 % vs BSP's 92.0 %
at 5.1x BSP's speed; up to 5.13x throughput overall. Settings assumed from the He et al.
CIFAR recipe: SGD lr 0.1, momentum 0.9, weight decay 1e-4, batch 128 per worker, disjoint
shards, 8000 steps (~164 epochs at the global batch of 1024), constant rate.
"""
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments._runner import Experiment, main
from jaxsel.train import TrainConfig


def full(data_dir=None) -> TrainConfig:
    return TrainConfig(dataset="cifar10", data_dir=data_dir, model="resnet32", strategy="syncswitch",
                       strategy_options={"policy": "offline", "bsp_fraction": 0.05}, replicas=8,
                       batch_size=128, steps=8_000, optimizer="sgd", lr=0.1, momentum=0.9,
                       weight_decay=1e-4, partition="disjoint", eval_every=250, log_every=50)


def tiny(data_dir=None) -> TrainConfig:
    """digits and the small CNN, 4 replicas; BSP for the first quarter."""
    return TrainConfig(dataset="digits", data_dir=data_dir, model="cnn", strategy="syncswitch",
                       strategy_options={"policy": "offline", "bsp_fraction": 0.25}, replicas=4,
                       batch_size=16, steps=60, optimizer="sgd", lr=0.05, momentum=0.9,
                       weight_decay=1e-4, partition="disjoint", eval_every=60, log_every=10)


EXPERIMENT = Experiment("syncswitch_resnet32_cifar10", __doc__.split("\n\n")[0], full, tiny,
                        baselines=("bsp", "asp"))

if __name__ == "__main__":
    main(EXPERIMENT)
