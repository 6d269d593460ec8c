"""SelSync (Tyagi & Swany, CLUSTER'23): ResNet-101 on CIFAR-10, 10 workers.

Paper settings: SGD lr 0.1, momentum 0.9, weight decay 1e-4, batch 32 per worker, SelDP
partitioning (every worker walks the whole set in its own order), SelSync with
delta = 0.3, W = 25, alpha = 0.01. Claim: BSP's accuracy or better at up to 14x less
training time; baselines BSP, FedAvg, SSP. The run length (epochs) and any learning-rate
schedule are not in the seed documents: we train 100 SelDP epochs at a constant rate.
"""
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments._runner import Experiment, main, steps_for
from jaxsel import TrainConfig

SELSYNC = {"delta": 0.3, "window": 25, "alpha": 0.01}


def full(data_dir=None) -> TrainConfig:
    epoch = steps_for(1, 50_000, 32)
    return TrainConfig(dataset="cifar10", data_dir=data_dir, model="resnet101", strategy="selsync",
                       strategy_options=dict(SELSYNC), replicas=10, batch_size=32,
                       steps=100 * epoch, optimizer="sgd", lr=0.1, momentum=0.9, weight_decay=1e-4,
                       partition="seldp", eval_every=epoch, log_every=50)


def tiny(data_dir=None) -> TrainConfig:
    """digits, the small CNN, 4 replicas; a 5-step window so SelSync leaves warm-up early."""
    return TrainConfig(dataset="digits", data_dir=data_dir, model="cnn", strategy="selsync",
                       strategy_options={**SELSYNC, "window": 5}, replicas=4, batch_size=16,
                       steps=60, optimizer="sgd", lr=0.05, momentum=0.9, weight_decay=1e-4,
                       partition="seldp", eval_every=60, log_every=10)


EXPERIMENT = Experiment("selsync_resnet101_cifar10", __doc__.split("\n\n")[0], full, tiny,
                        baselines=("bsp", "fedavg", "ssp"))

if __name__ == "__main__":
    main(EXPERIMENT)
