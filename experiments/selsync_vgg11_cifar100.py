"""SelSync (Tyagi & Swany, CLUSTER'23): VGG-11 (no BatchNorm) on CIFAR-100, 10 workers.

From the authors' code (github sahiltyagi4/SelSync, `selsync_py3/`): `scripts/selsync_vgg11.sh`
(10 workers, SGD lr 0.01, momentum 0.9, weight decay 5e-4, SelDP `--data-dist=iid`, data
injection off, SelSync delta = 0.3, W = 25, and alpha = 0.25: the script sets
`alpha=0.01`, then reuses the name for the injection fraction `alpha=0.25` before passing
`--smoothing=$alpha`), the batch 32 of `selsync/selsync_imgclassifier.py`'s parser (the
script passes none), `helper/dnn_models.py` (`VGG11Obj`: torchvision's `vgg11`, without
BatchNorm; milestones 50, 75, 100, gamma 0.1, at epochs counted from samples, b per local
step and b*N per synced one, of the 50,000 training images: `--lr-schedule
sample-epochs:50,75,100@0.1`). Their FedAvg baseline (`scripts/fedavg_vgg11.sh`,
`fedavg/iid_imgclassifier.py`) averages the parameters after every 250th step, each worker
on its own disjoint shard: `--strategy fedavg`. `--noniid` is their non-IID mode
(`helper/noniid_datapartitioner.py`: floor(C/N) classes per worker, the rest dropped) with
their data injection settings alpha = beta = 0.25 (`helper/datainjection.py`); their
non-IID FedAvg (`scripts/fedavgNonIID_vgg11.sh`) ran 10 workers as this recipe does.

Ours: the run length (150 epochs of samples at BSP's pace, past the last milestone), the
model's classifier (jaxsel's CIFAR port, 512 features -> 100 classes; theirs keeps
torchvision's ImageNet head, 25088 -> 4096 -> 4096 -> 1000, with dropout), parameter
averaging on a sync (the script's `--aggregation=model` matches neither branch of their
loop, so its syncs would average nothing; `parameter` is what their ResNet-101 script
runs), and FedAvg at this recipe's 10 workers and batch 32 (their IID script: 8 workers at
the parser's default batch 20).
"""
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments._runner import Experiment, main, steps_for
from jaxsel import TrainConfig

SELSYNC = {"delta": 0.3, "window": 25, "alpha": 0.25, "sync": "params"}
#: scripts/fedavg_vgg11.sh: parameters averaged every 250 steps (a plain mean)
FEDAVG = {"strategy_options": {"period": 250, "aggregator": "mean"}, "partition": "disjoint"}


def full(data_dir=None) -> TrainConfig:
    bsp_epoch = steps_for(1, 50_000, 32, replicas=10)   # an epoch of samples when every step syncs
    return TrainConfig(dataset="cifar100", data_dir=data_dir, model="vgg11_nobn", strategy="selsync",
                       strategy_options=dict(SELSYNC), replicas=10, batch_size=32,
                       steps=150 * bsp_epoch, optimizer="sgd", lr=0.01, momentum=0.9, weight_decay=5e-4,
                       lr_schedule="sample-epochs:50,75,100@0.1", partition="seldp",
                       eval_every=5 * bsp_epoch, log_every=50)


def tiny(data_dir=None) -> TrainConfig:
    """digits and the small CNN (VGG-11 needs 32x32 inputs), 4 replicas; decays after 1
    and 2 epochs of samples (1437 digits each: steps 23 and 45 where every step syncs)."""
    return TrainConfig(dataset="digits", data_dir=data_dir, model="cnn", strategy="selsync",
                       strategy_options={**SELSYNC, "window": 5}, replicas=4, batch_size=16,
                       steps=60, optimizer="sgd", lr=0.05, momentum=0.9, weight_decay=5e-4,
                       lr_schedule="sample-epochs:1,2@0.1", partition="seldp", eval_every=60,
                       log_every=10)


EXPERIMENT = Experiment("selsync_vgg11_cifar100", __doc__.split("\n\n")[0], full, tiny,
                        baselines=("bsp", "fedavg", "ssp"), baseline_settings={"fedavg": FEDAVG})

if __name__ == "__main__":
    main(EXPERIMENT)
