"""SelSync (Tyagi & Swany, CLUSTER'23): AlexNet on ImageNet-1k, 10 workers.

From the authors' code (github sahiltyagi4/SelSync, `selsync_py3/`): `scripts/selsync_alexnet.sh`
(10 workers, batch 128 per worker, lr 1e-4, SelSync delta = 0.3, W = 25, alpha = 0.01,
test batch 128), `helper/dnn_models.py` (`AlexNetObj`: torchvision's AlexNet trained with
Adam at that lr and nothing else: the script's momentum 0.9 and weight decay 5e-4 reach
the constructor but not the optimizer; no learning-rate schedule) and
`selsync/selsync_imgclassifier.py` (SelDP: its parser's `--data-dist=iid`, which the
script leaves; the script's `--datapartition` is not read by that loop). Their FedAvg
baseline (`scripts/fedavg_alexnet.sh`, `fedavg/iid_imgclassifier.py`) averages the
parameters after every 250th step, each worker on its own disjoint shard, batch 128:
`--strategy fedavg`.

Ours: the run length (30 SelDP epochs), ImageNet read record by record from the
ArrayRecord files (never held in memory), resized to 224x224 on the host, cropped/flipped
and normalised on the device; evaluation on the first 10000 validation images, of the
replica average (`--set eval_examples=50000` for all; theirs: each worker its own model);
parameter averaging on a sync (the script's `--aggregation=model` matches neither branch of
their loop, so its syncs would average nothing; `parameter` is what their ResNet-101
script runs); FedAvg at this recipe's 10 workers (their FedAvg script: 8).
"""
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments._runner import Experiment, main, steps_for
from jaxsel import TrainConfig

SELSYNC = {"delta": 0.3, "window": 25, "alpha": 0.01, "sync": "params"}
#: scripts/fedavg_alexnet.sh: parameters averaged every 250 steps (a plain mean)
FEDAVG = {"strategy_options": {"period": 250, "aggregator": "mean"}, "partition": "disjoint"}


def full(data_dir=None) -> TrainConfig:
    epoch = steps_for(1, 1_281_167, 128)
    return TrainConfig(dataset="imagenet2012", data_dir=data_dir, model="alexnet", strategy="selsync",
                       strategy_options=dict(SELSYNC), replicas=10, batch_size=128,
                       steps=30 * epoch, optimizer="adam", lr=1e-4, momentum=0.0, weight_decay=0.0,
                       partition="seldp", eval_every=epoch // 4, log_every=100,
                       eval_examples=10_000, loader_workers=8, prefetch=4)


def tiny(data_dir=None) -> TrainConfig:
    """digits and the small CNN with Adam (AlexNet needs large images), 4 replicas."""
    return TrainConfig(dataset="digits", data_dir=data_dir, model="cnn", strategy="selsync",
                       strategy_options={**SELSYNC, "window": 5}, replicas=4, batch_size=16,
                       steps=60, optimizer="adam", lr=1e-3, momentum=0.0,
                       partition="seldp", eval_every=60, log_every=10)


EXPERIMENT = Experiment("selsync_alexnet_imagenet", __doc__.split("\n\n")[0], full, tiny,
                        baselines=("bsp", "fedavg", "ssp"), baseline_settings={"fedavg": FEDAVG})

if __name__ == "__main__":
    main(EXPERIMENT)
