"""SelSync (Tyagi & Swany, CLUSTER'23): VGG-11 on CIFAR-100, 10 workers.

Paper settings: SGD lr 0.01, weight decay 5e-4 (momentum 0.9 assumed), batch 32 per
worker, SelDP, SelSync delta = 0.3, W = 25, alpha = 0.01. The paper's non-IID study
(label-skewed shards, C/N classes per worker, plus data injection) was run on CIFAR;
`--noniid ALPHA,BETA` switches to it, e.g. `--noniid 0.1,0.5`. Run length is ours (100
SelDP epochs, constant rate): the seed documents do not give it.
"""
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments._runner import Experiment, main, steps_for
from jaxsel import TrainConfig

SELSYNC = {"delta": 0.3, "window": 25, "alpha": 0.01}


def full(data_dir=None) -> TrainConfig:
    epoch = steps_for(1, 50_000, 32)
    return TrainConfig(dataset="cifar100", data_dir=data_dir, model="vgg11", strategy="selsync",
                       strategy_options=dict(SELSYNC), replicas=10, batch_size=32,
                       steps=100 * epoch, optimizer="sgd", lr=0.01, momentum=0.9, weight_decay=5e-4,
                       partition="seldp", eval_every=epoch, log_every=50)


def tiny(data_dir=None) -> TrainConfig:
    """digits and the small CNN (VGG-11 needs 32x32 inputs), 4 replicas."""
    return TrainConfig(dataset="digits", data_dir=data_dir, model="cnn", strategy="selsync",
                       strategy_options={**SELSYNC, "window": 5}, replicas=4, batch_size=16,
                       steps=60, optimizer="sgd", lr=0.05, momentum=0.9, weight_decay=5e-4,
                       partition="seldp", eval_every=60, log_every=10)


EXPERIMENT = Experiment("selsync_vgg11_cifar100", __doc__.split("\n\n")[0], full, tiny,
                        baselines=("bsp", "fedavg", "ssp"))

if __name__ == "__main__":
    main(EXPERIMENT)
