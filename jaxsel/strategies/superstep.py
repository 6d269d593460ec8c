"""Superstep averaging (the student slides' study): every replica trains on its own for
E epochs, then the parameters are replaced by their aggregate (mean, median, min, max,
trimmed:K, weighted, random); period = E x steps_per_epoch."""
from __future__ import annotations

import dataclasses

from .base import TriggeredStrategy
from .localsgd import LocalSGD


def Superstep(
    epochs: float = 1,
    steps_per_epoch: int | None = None,
    aggregator="mean",
    sync_model_state: bool = True,
) -> TriggeredStrategy:
    """Sync every `epochs` epochs (fractions allowed; at least every step). The training
    loop passes `steps_per_epoch`; syncs fall after step t with (t + 1) % period == 0."""
    if steps_per_epoch is None or int(steps_per_epoch) < 1:
        raise ValueError(f"Superstep needs steps_per_epoch >= 1 (the training loop passes it), got {steps_per_epoch!r}")
    if not float(epochs) > 0:
        raise ValueError(f"Superstep epochs must be a number > 0, got {epochs!r}")
    period = max(1, int(round(float(epochs) * int(steps_per_epoch))))
    local = LocalSGD(period=period, aggregator=aggregator, sync_model_state=sync_model_state)
    return dataclasses.replace(local, name="superstep")
