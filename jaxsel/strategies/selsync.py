"""SelSync: synchronize only when the gradient's relative change is significant."""
from __future__ import annotations

from ..triggers import Significance
from .base import TriggeredStrategy

AGGREGATE_WHAT = {"params": "params", "grads": "grads"}


def SelSync(
    delta: float = 0.3,
    window: int = 25,
    alpha: float = 0.01,
    aggregate: str = "params",
    aggregator="mean",
    sync_model_state: bool = False,
) -> TriggeredStrategy:
    """Tyagi & Swany (CLUSTER'23). Each replica votes from a windowed EWMA of the relative
    change of its gradient-norm EWMA; any vote syncs (a `psum` of the votes). A sync averages the
    parameters, then each replica applies its own update (`aggregate="params"`), or
    averages gradients (`aggregate="grads"`). Optimizer and BatchNorm state stay local
    unless configured."""
    if aggregate not in AGGREGATE_WHAT:
        raise ValueError(f"aggregate must be 'params' or 'grads', got {aggregate!r}")
    return TriggeredStrategy(
        trigger=Significance(delta=float(delta), window=int(window), alpha=float(alpha)),
        sync=AGGREGATE_WHAT[aggregate], aggregator=aggregator,
        sync_model_state=sync_model_state, name="selsync",
    )
