"""SSD-SGD (Xu et al., several-steps-delay SGD): ResNet-20 on CIFAR-10.

BSP warm-up, then local weights run on their own gradients with the GLU correction while
the global weights take the synchronous averaged update; every k = 5 steps the local
weights are pulled back to the global ones. Reference scripts: local lr = 4x lr. Paper:
up to 110 % faster than synchronous SGD with good accuracy. Assumed: 8 workers, SGD lr
0.1, momentum 0.9, weight decay 1e-4, batch 128 per worker, disjoint shards, 8000 steps
(~164 epochs at the global batch of 1024), 250 warm-up steps.
"""
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments._runner import Experiment, main
from jaxsel import TrainConfig


def full(data_dir=None) -> TrainConfig:
    return TrainConfig(dataset="cifar10", data_dir=data_dir, model="resnet20", strategy="ssdsgd",
                       strategy_options={"period": 5, "local_lr_scale": 4.0, "warmup_steps": 250},
                       replicas=8, batch_size=128, steps=8_000, optimizer="sgd", lr=0.1,
                       momentum=0.9, weight_decay=1e-4, partition="disjoint", eval_every=250,
                       log_every=50)


def tiny(data_dir=None) -> TrainConfig:
    """mnist1d and the MLP, 4 replicas, 10 warm-up steps."""
    return TrainConfig(dataset="mnist1d", data_dir=data_dir, model="mlp", strategy="ssdsgd",
                       strategy_options={"period": 5, "local_lr_scale": 4.0, "warmup_steps": 10},
                       replicas=4, batch_size=16, steps=60, optimizer="sgd", lr=0.02,
                       momentum=0.9, weight_decay=1e-4, partition="disjoint", eval_every=60,
                       log_every=10)


EXPERIMENT = Experiment("ssdsgd_resnet20_cifar10", __doc__.split("\n\n")[0], full, tiny,
                        baselines=("bsp",))

if __name__ == "__main__":
    main(EXPERIMENT)
