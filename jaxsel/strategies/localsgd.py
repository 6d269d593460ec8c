"""Local SGD / FedAvg: local optimizer steps, parameters replaced by their aggregate
after every `period` steps (at step t when (t + 1) % period == 0)."""
from __future__ import annotations

from ..aggregate import ClientSampled
from ..triggers import Periodic
from .base import TriggeredStrategy


def LocalSGD(period: int = 50, aggregator="mean", sync_model_state: bool = True) -> TriggeredStrategy:
    """Every replica applies its own update each step; after every `period`-th update
    the updated parameters (and, by default, BatchNorm statistics) are aggregated."""
    return TriggeredStrategy(
        trigger=Periodic(int(period)), sync="model", aggregator=aggregator,
        sync_model_state=sync_model_state, name="localsgd",
    )


def FedAvg(
    period: int = 50,
    fraction: float = 1.0,
    aggregator="weighted",
    sync_model_state: bool = True,
    seed: int = 0,
) -> TriggeredStrategy:
    """Federated averaging (McMahan et al.): rounds of `period` local steps, then the
    parameters are averaged weighted by the samples each replica saw since the last sync.

    `fraction` (C < 1) samples clients: at each sync max(1, round(C*N)) replicas, drawn
    without replacement from a key of the replicated step, are averaged; everyone adopts
    the result; the non-participants' local work of that round is discarded (in a real
    deployment they would not have trained). Their optimizer state stays local, as in
    every strategy here. `aggregator` may be any aggregator with C = 1; with C < 1 only
    "weighted" or "mean" (over participants)."""
    fraction = float(fraction)
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"FedAvg fraction C must be in (0, 1], got {fraction!r}")
    if fraction < 1.0:
        if aggregator not in ("weighted", "mean"):
            raise ValueError(f"FedAvg with client sampling (fraction={fraction}) averages with "
                             f"'weighted' or 'mean', got aggregator={aggregator!r}")
        aggregator = ClientSampled(fraction=fraction, base=aggregator, seed=int(seed))
    return TriggeredStrategy(
        trigger=Periodic(int(period)), sync="model", aggregator=aggregator,
        sync_model_state=sync_model_state, name="fedavg",
    )
