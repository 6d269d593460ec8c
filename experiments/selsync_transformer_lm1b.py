"""SelSync (Tyagi & Swany, CLUSTER'23): 2-layer Transformer language model, 10 workers.

Paper settings: SGD lr 2.0 (no momentum), gradient clipping at norm 2.0, SelDP, SelSync
delta = 0.3, W = 25, alpha = 0.01, on WikiText-103. WikiText-103 is not a TFDS dataset,
so we train on TFDS's `lm1b` (One Billion Word, the other standard word-level benchmark)
with an honest byte-level tokenizer: 128-byte windows, vocabulary 256, next-byte loss.
Batch 32 windows per worker (assumed); run length ours (200k steps).
"""
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments._runner import Experiment, main
from jaxsel import TrainConfig
from jaxsel.models import MODEL_REGISTRY
from jaxsel.models.transformer import TransformerLM


def _narrow_lm(input_shape, num_classes, rngs):
    """The same 2-layer pre-LN Transformer, 64 wide with 2 heads: seconds on a CPU."""
    return TransformerLM(num_classes, int(input_shape[0]), d_model=64, num_heads=2, num_layers=2, rngs=rngs)


MODEL_REGISTRY.setdefault("transformer_lm_tiny", _narrow_lm)

SELSYNC = {"delta": 0.3, "window": 25, "alpha": 0.01}


def full(data_dir=None) -> TrainConfig:
    return TrainConfig(dataset="lm1b", data_dir=data_dir, dataset_options={"seq_len": 128},
                       model="transformer_lm", strategy="selsync", strategy_options=dict(SELSYNC),
                       replicas=10, batch_size=32, steps=200_000, optimizer="sgd", lr=2.0,
                       momentum=0.0, clip_norm=2.0, partition="seldp", eval_every=5_000,
                       log_every=100, eval_examples=2_048)


def tiny(data_dir=None) -> TrainConfig:
    """digits as 64-token pixel sequences (17 levels), a narrow 2-layer Transformer."""
    return TrainConfig(dataset="digits_tokens", data_dir=data_dir, model="transformer_lm_tiny",
                       strategy="selsync", strategy_options={**SELSYNC, "window": 5}, replicas=4,
                       batch_size=16, steps=60, optimizer="sgd", lr=2.0, momentum=0.0, clip_norm=2.0,
                       partition="seldp", eval_every=60, log_every=10, eval_examples=96)


EXPERIMENT = Experiment("selsync_transformer_lm1b", __doc__.split("\n\n")[0], full, tiny,
                        baselines=("bsp", "fedavg", "ssp"))

if __name__ == "__main__":
    main(EXPERIMENT)
