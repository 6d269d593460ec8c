"""BSP: average gradients over all replicas on every step, then apply the optimizer."""
from __future__ import annotations

from ..triggers import Always
from .base import TriggeredStrategy


def BSP(aggregator="mean", sync_model_state: bool = False) -> TriggeredStrategy:
    """Bulk-synchronous parallel. With N replicas on batches of b it equals one device
    on the concatenated N*b batch (for a loss that is a mean over examples)."""
    return TriggeredStrategy(
        trigger=Always(), sync="grads", aggregator=aggregator, sync_model_state=sync_model_state, name="bsp"
    )
