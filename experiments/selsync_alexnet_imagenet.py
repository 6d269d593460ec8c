"""SelSync (Tyagi & Swany, CLUSTER'23): AlexNet on ImageNet-1k, 10 workers.

Paper settings: Adam lr 1e-4, batch 32 per worker, SelDP, SelSync delta = 0.3, W = 25,
alpha = 0.01. ImageNet is read record by record from the ArrayRecord files (never held in
memory), resized to 224x224 on the host, cropped/flipped and normalised on the device.
Evaluation uses the first 10000 validation images to keep evals short (`--set
eval_examples=50000` for all). Run length is ours (30 epochs): not in the seed documents.
"""
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments._runner import Experiment, main, steps_for
from jaxsel import TrainConfig

SELSYNC = {"delta": 0.3, "window": 25, "alpha": 0.01}


def full(data_dir=None) -> TrainConfig:
    epoch = steps_for(1, 1_281_167, 32)
    return TrainConfig(dataset="imagenet2012", data_dir=data_dir, model="alexnet", strategy="selsync",
                       strategy_options=dict(SELSYNC), replicas=10, batch_size=32,
                       steps=30 * epoch, optimizer="adam", lr=1e-4, momentum=0.0,
                       partition="seldp", eval_every=epoch // 4, log_every=100,
                       eval_examples=10_000, loader_workers=8, prefetch=4)


def tiny(data_dir=None) -> TrainConfig:
    """digits and the small CNN with Adam (AlexNet needs large images), 4 replicas."""
    return TrainConfig(dataset="digits", data_dir=data_dir, model="cnn", strategy="selsync",
                       strategy_options={**SELSYNC, "window": 5}, replicas=4, batch_size=16,
                       steps=60, optimizer="adam", lr=1e-3, momentum=0.0,
                       partition="seldp", eval_every=60, log_every=10)


EXPERIMENT = Experiment("selsync_alexnet_imagenet", __doc__.split("\n\n")[0], full, tiny,
                        baselines=("bsp", "fedavg", "ssp"))

if __name__ == "__main__":
    main(EXPERIMENT)
