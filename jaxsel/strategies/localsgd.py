"""Local SGD / FedAvg: local optimizer steps, parameters replaced by their aggregate
after every `period` steps (at step t when (t + 1) % period == 0)."""
from __future__ import annotations

from ..triggers import Periodic
from .base import TriggeredStrategy


def LocalSGD(period: int = 50, aggregator="mean", sync_model_state: bool = True) -> TriggeredStrategy:
    """Every replica applies its own update each step; after every `period`-th update
    the updated parameters (and, by default, BatchNorm statistics) are averaged."""
    return TriggeredStrategy(
        trigger=Periodic(int(period)), sync="model", aggregator=aggregator,
        sync_model_state=sync_model_state, name="localsgd",
    )


def FedAvg(period: int = 50, sync_model_state: bool = True) -> TriggeredStrategy:
    """Federated averaging with full participation: parameters weighted by the samples
    each replica saw in the step that ends the round."""
    return TriggeredStrategy(
        trigger=Periodic(int(period)), sync="model", aggregator="weighted",
        sync_model_state=sync_model_state, name="fedavg",
    )
