"""How the cost model charges a strategy's steps, derived from what the strategy declares.

A strategy says nothing about time itself: the collective of its syncs follows from its
aggregator and codec (`aggregator`, `compress`), how a sync nobody waits on is paid from its
`background` (its `traits_of`), how far an asynchronous worker may run ahead from its
`staleness`, the replica groups from the `Hierarchical` (two-level) composition, and the
islands of island averaging from its aggregator (`aggregate.IslandMean`).
"""
from __future__ import annotations

from typing import NamedTuple

from ..core import compression
from ..core.aggregate import IslandMean, get_aggregator
from ..strategies import Hierarchical, traits_of


class Timing(NamedTuple):
    """`costmodel.Projector`'s settings for one strategy."""

    collective: str = "allreduce"        # "allreduce" or "allgather" for a sync
    background: str = "async"            # how a step that moves bytes without waiting is paid
    staleness: int | None = None         # async protocols: steps a worker may run ahead
    groups: int | None = None            # two-level methods: replica groups (hosts); steps report
                                         # their group-level bytes as the metric "group_bytes"
    islands: int | None = None           # island averaging: replicas per island (a fresh random split
                                         # per sync), its syncs reported as group-level ones


def strategy_timing(strategy) -> Timing:
    """The Projector settings of `strategy` (see the module docstring)."""
    if isinstance(strategy, Hierarchical):   # the all-replica level's sync, charged per group level
        return strategy_timing(strategy.outer)._replace(groups=strategy.group_count())
    aggregator = get_aggregator(strategy.aggregator or "mean")   # None: the method's syncs are means
    return Timing(collective=compression.collective(strategy.compress, aggregator),
                  background=traits_of(strategy).background, staleness=strategy.staleness,
                  islands=aggregator.size if isinstance(aggregator, IslandMean) else None)
