"""SelSync (Tyagi & Swany, CLUSTER'23): ResNet-101 on CIFAR-10, 10 workers.

From the authors' code (github sahiltyagi4/SelSync, `selsync_py3/`): `scripts/selsync_resnet101.sh`
(10 workers, batch 32 per worker, SGD lr 0.1, momentum 0.9, weight decay 1e-4, SelDP
partitioning `--data-dist=iid`: every worker walks the whole set in its own order, data
injection off, `--aggregation=parameter`: parameters averaged before the worker's own
update, SelSync delta = 0.3, W = 25, alpha = 0.01), `helper/dnn_models.py` (`ResNet101Obj`:
milestones 110, 150, 190, 250, gamma 0.1) and `selsync/selsync_imgclassifier.py` (the decay
happens at epochs counted from samples, b per local step and b*N per synced step, of the
50,000 training images: `--lr-schedule sample-epochs:110,150,190,250@0.1`). Their FedAvg
baseline (`scripts/fedavgIID_resnet101.sh`, `fedavg/iid_imgclassifier.py`) averages the
parameters (a plain mean, BatchNorm statistics left local) after every 250th step, each
worker on its own disjoint shard: `--strategy fedavg` runs it so.

Ours: the run length (300 epochs of samples at BSP's pace, past the last milestone; their
loop runs `--epochs 10000`), the model (jaxsel's ResNet-101 with the CIFAR stem and 10
outputs; theirs is torchvision's ImageNet ResNet-101 with 1000 outputs), evaluation of
the replica average (theirs: each worker its own), and FedAvg at this recipe's 10 workers
and batch 32 (their IID FedAvg script ran 8 workers at the parser's default batch 20, and
as released passes no `--model`, so it would train the parser's default model).
"""
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments._runner import Experiment, main, steps_for
from jaxsel import TrainConfig

SELSYNC = {"delta": 0.3, "window": 25, "alpha": 0.01, "sync": "params"}
#: scripts/fedavgIID_resnet101.sh: parameters averaged every 250 steps (named_parameters only)
FEDAVG = {"strategy_options": {"period": 250, "aggregator": "mean", "sync_model_state": False},
          "partition": "disjoint"}


def full(data_dir=None) -> TrainConfig:
    bsp_epoch = steps_for(1, 50_000, 32, replicas=10)   # an epoch of samples when every step syncs
    return TrainConfig(dataset="cifar10", data_dir=data_dir, model="resnet101", strategy="selsync",
                       strategy_options=dict(SELSYNC), replicas=10, batch_size=32,
                       steps=300 * bsp_epoch, optimizer="sgd", lr=0.1, momentum=0.9, weight_decay=1e-4,
                       lr_schedule="sample-epochs:110,150,190,250@0.1", partition="seldp",
                       eval_every=5 * bsp_epoch, log_every=50)


def tiny(data_dir=None) -> TrainConfig:
    """digits, the small CNN, 4 replicas; a 5-step window so SelSync leaves warm-up early;
    decays after 1 and 2 epochs of samples (1437 digits each: steps 23 and 45 where every
    step syncs)."""
    return TrainConfig(dataset="digits", data_dir=data_dir, model="cnn", strategy="selsync",
                       strategy_options={**SELSYNC, "window": 5}, replicas=4, batch_size=16,
                       steps=60, optimizer="sgd", lr=0.05, momentum=0.9, weight_decay=1e-4,
                       lr_schedule="sample-epochs:1,2@0.1", partition="seldp", eval_every=60,
                       log_every=10)


EXPERIMENT = Experiment("selsync_resnet101_cifar10", __doc__.split("\n\n")[0], full, tiny,
                        baselines=("bsp", "fedavg", "ssp"), baseline_settings={"fedavg": FEDAVG})

if __name__ == "__main__":
    main(EXPERIMENT)
