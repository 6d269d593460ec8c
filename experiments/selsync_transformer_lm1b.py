"""SelSync (Tyagi & Swany, CLUSTER'23): 2-layer Transformer language model, 8 workers.

From the authors' code (github sahiltyagi4/SelSync, `selsync_py3/`): `scripts/selsync_transformer.sh`
(8 workers, lr 2.0, StepLR gamma 0.8 with `--step-size=2.0` stepped every
`--lr-decay-steps=2000` steps, so x0.8 every 4000 steps: `--lr-schedule every:4000@0.8`,
SelSync delta = 0.3, W = 25, alpha = 0.01, `--datapartition=defaultpartition`: disjoint
shards, 1/N of the data each, `helper/default_datapartitioner.py`), `helper/dnn_models.py`
(`TransformerObj`: plain SGD, no momentum) and `selsync/selsync_transformer.py` (gradients
clipped to global norm 2.0 right after `backward()`, a constant in the loop; the script's
`--norm-clip=0.5` is not read; the statistic s_t is then measured on the clipped
gradients: `--clip-norm 2.0 --clip-at gradients`). That file has no argument parser; the
only one written for this model, `fedavg/launch_transformer.py`'s, gives its shape: batch
20, 2 layers, 2 heads, width 200, feed-forward 200 (dropout 0.2), on WikiText-103. Their
Transformer FedAvg (`scripts/fedavg_transformer.sh`, 10 workers) averages the parameters
at the end of each pass over a worker's shard, not every 250 steps (its `--fedavg-steps`
is parsed and not read): `--strategy fedavg --opt period=P` with P a shard's steps.

Ours: WikiText-103 is not a TFDS dataset, so we train on TFDS's `lm1b` (One Billion Word,
the other standard word-level benchmark) with an honest byte-level tokenizer: 128-byte
windows, vocabulary 256, next-byte loss. The model is jaxsel's pre-LayerNorm Transformer at
their width (200, 2 heads, 2 layers, feed-forward 200) without dropout (theirs: PyTorch's
post-LN `TransformerEncoderLayer`). Parameter averaging on a sync (the script's
`--aggregation=model` matches neither branch of their loop, so its syncs would average
nothing). The run length (200k steps).
"""
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments._runner import Experiment, main
from jaxsel import TrainConfig
from jaxsel.models import MODEL_REGISTRY
from jaxsel.models.transformer import TransformerLM


def _their_width(input_shape, num_classes, rngs):
    """2 layers, 2 heads, width 200, feed-forward 200: `launch_transformer.py`'s defaults."""
    return TransformerLM(num_classes, int(input_shape[0]), d_model=200, num_heads=2, num_layers=2, mlp_ratio=1,
                         rngs=rngs)


def _narrow_lm(input_shape, num_classes, rngs):
    """The same 2-layer pre-LN Transformer, 64 wide with 2 heads: seconds on a CPU."""
    return TransformerLM(num_classes, int(input_shape[0]), d_model=64, num_heads=2, num_layers=2, rngs=rngs)


MODEL_REGISTRY.setdefault("transformer_lm_200", _their_width)
MODEL_REGISTRY.setdefault("transformer_lm_tiny", _narrow_lm)

SELSYNC = {"delta": 0.3, "window": 25, "alpha": 0.01, "sync": "params"}
#: fedavg/launch_transformer.py averages the parameters (a plain mean); its period is a shard's pass
FEDAVG = {"strategy_options": {"aggregator": "mean"}}


def full(data_dir=None) -> TrainConfig:
    return TrainConfig(dataset="lm1b", data_dir=data_dir, dataset_options={"seq_len": 128},
                       model="transformer_lm_200", strategy="selsync", strategy_options=dict(SELSYNC),
                       replicas=8, batch_size=20, steps=200_000, optimizer="sgd", lr=2.0, momentum=0.0,
                       lr_schedule="every:4000@0.8", clip_norm=2.0, clip_at="gradients", partition="disjoint",
                       eval_every=5_000, log_every=100, eval_examples=2_048)


def tiny(data_dir=None) -> TrainConfig:
    """digits as 64-token pixel sequences (17 levels), a narrow 2-layer Transformer; the
    rate decays every 20 steps so the schedule shows inside 60."""
    return TrainConfig(dataset="digits_tokens", data_dir=data_dir, model="transformer_lm_tiny",
                       strategy="selsync", strategy_options={**SELSYNC, "window": 5}, replicas=4,
                       batch_size=16, steps=60, optimizer="sgd", lr=2.0, momentum=0.0, lr_schedule="every:20@0.8",
                       clip_norm=2.0, clip_at="gradients", partition="disjoint", eval_every=60, log_every=10,
                       eval_examples=96)


EXPERIMENT = Experiment("selsync_transformer_lm1b", __doc__.split("\n\n")[0], full, tiny,
                        baselines=("bsp", "fedavg", "ssp"), baseline_settings={"fedavg": FEDAVG})

if __name__ == "__main__":
    main(EXPERIMENT)
