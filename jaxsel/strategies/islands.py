"""Island averaging as a method of its own: local SGD whose every sync averages within
random islands of K replicas (2 by default), a fresh split at each sync, instead of over
all N. Less traffic per sync than a global mean on a real cluster (an all-reduce among K,
not N; each replica still sends its parameters once, so the bytes per replica are local
SGD's), and the islands mix the model over successive syncs.

It is `LocalSGD(islands=K)` under a name of its own, so that `jaxsel frontier` places it
beside local SGD (its budget grid: the period, and islands of 4); the islands are
`aggregate.IslandMean`'s, drawn from the run's seed and the step of each sync."""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from ..core.budget import sweep
from ..core.checks import check_int
from ..core.sync import STRATEGIES
from .localsgd import LocalSGD
from .traits import method_traits


@STRATEGIES.register("islands")
@method_traits(budget=sweep("period", 4, 16) + sweep("islands", 4, period=4))
@dataclasses.dataclass(frozen=True)
class IslandAveraging(LocalSGD):
    """islands: K, the replicas per island (it must divide N); period (default 50), seed
    (unset: the run's) and the rest: local SGD's."""

    islands: int | None = 2
    """K: the replicas per island, dividing N; a fresh random split at each sync"""
    name: ClassVar[str] = "islands"
    composable: ClassVar[bool] = False   # random islands cannot sit inside a two-level method's groups

    def __post_init__(self):
        check_int("islands (replicas per island)", self.islands, 2)
        super().__post_init__()
