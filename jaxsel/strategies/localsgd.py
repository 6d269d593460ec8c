"""Local SGD / FedAvg: local optimizer steps, parameters replaced by their aggregate
after every `period` steps (at step t when (t + 1) % period == 0), or on exactly `syncs`
of the run's steps, evenly spread (`triggers.Spread`): the budget-matched baseline of an
adaptive method, whose sync count an integer period can rarely hit. `islands=K` averages
within random islands of K replicas instead, drawn afresh at each sync (island averaging,
`aggregate.IslandMean`); the `islands` strategy is local SGD with islands of 2."""
from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from ..core.budget import sweep
from ..core.aggregate import ClientSampled, IslandMean, Mean
from ..core.checks import MAX_SEED, check_int
from ..core.sync import STRATEGIES
from ..core.triggers import Periodic, Spread
from .opt_state_period import average_on_periods, check_fields, check_period
from .payload import ModelPayload
from .traits import method_traits
from .triggered import Triggered

#: local SGD's period when neither `period` nor `syncs` is set
DEFAULT_PERIOD = 50


@STRATEGIES.register("localsgd")
@method_traits(budget=sweep("period", 2, 4, 8, 16, 50))
@dataclasses.dataclass(frozen=True)
class LocalSGD(ModelPayload, Triggered):
    """Every replica applies its own update each step; after every `period`-th update
    (None: 50) the updated parameters (and, by default, BatchNorm statistics) are
    aggregated. `syncs=K` instead aggregates after exactly K of the run's `total_steps`
    updates, evenly spread (`triggers.Spread`; it takes no `period`). `opt_state_period`
    averages the optimizer's state on periods of its own (DES-LOC;
    `strategies/opt_state_period.py`); None keeps it local. `islands=K`: each sync averages
    within islands of K replicas, a fresh random split per sync drawn from `seed` (unset:
    the run's) and the step (`aggregate.IslandMean`); it replaces the mean aggregator."""

    period: int | None = None
    """steps between two averagings of the updated parameters (none: 50)"""
    opt_state_period: Any = None
    syncs: int | None = None
    """K: average after exactly K of the run's steps, evenly spread, instead of a period"""
    total_steps: int | None = None
    islands: int | None = None
    """K: each sync averages within random islands of K replicas, drawn afresh (none: over all)"""
    seed: int = 0
    name: ClassVar[str] = "localsgd"
    sync: ClassVar[str] = "model"
    context_fields: ClassVar[tuple[str, ...]] = ("total_steps", "seed")   # seed: the islands' draw
    # the period, read only in the trigger's modulus; the seed and the aggregator's (islands', a client
    # sample's draw), read only as a PRNG key's seed (core/cell_options.py)
    cell_options: ClassVar[tuple[str, ...]] = ("period", "seed", "aggregator")

    def __post_init__(self):
        self.settle_islands()
        if self.syncs is not None:
            if self.period is not None:
                raise ValueError(f"{self.name} takes period={self.period!r} or syncs={self.syncs!r}, not both: "
                                 f"syncs spreads that many syncs over the run instead of a period")
            if self.total_steps is None:
                raise ValueError(f"{self.name} syncs={self.syncs!r} needs total_steps (the run's steps) to spread "
                                 f"its syncs over")
        elif self.period is None:
            self.settle(period=DEFAULT_PERIOD)
        self.settle(opt_state_period=check_period(self.opt_state_period))
        super().__post_init__()

    def settle_islands(self) -> None:
        """`islands=K`: the aggregator becomes IslandMean(K, seed), in place of the mean."""
        check_int("seed", self.seed, 0, MAX_SEED)
        if self.islands is None:
            return
        check_int("islands (replicas per island)", self.islands, 2)
        islands = IslandMean(int(self.islands), int(self.seed))
        if self.aggregator != islands and not (self.aggregator == "mean" or isinstance(self.aggregator, Mean)):
            raise ValueError(f"{self.name} islands={self.islands!r} takes a plain mean within each island; it "
                             f"takes no other aggregator, got aggregator={self.aggregator!r}")
        self.settle(aggregator=islands)

    @property
    def trigger(self):
        if self.syncs is not None:
            return Spread(self.syncs, self.total_steps)
        return Periodic(self.period)

    def init(self, params, opt_state, n):
        check_fields(self.opt_state_period, opt_state)
        return super().init(params, opt_state, n)

    def level(self, st, stats, ctx, groups=None, gate=True):
        if gate is not True and self.opt_state_period is not None:
            raise ValueError(f"{self.name}: opt_state_period counts the run's steps; inside a phase of "
                             f"Phases it is not supported")
        return super().level(st, stats, ctx, groups, gate)

    def sync_after(self, rs, decide, ctx, agg, groups=None):
        """The parameters' sync, then the optimizer state's on its own periods."""
        rs = super().sync_after(rs, decide, ctx, agg, groups)
        return rs.replace(opt_state=average_on_periods(rs.opt_state, self.opt_state_period, ctx, groups))

    def describe(self) -> str:
        state = "" if self.opt_state_period is None else f", optimizer state every {self.opt_state_period}"
        when = f"period {self.period}" if self.syncs is None else f"{self.syncs} of {self.total_steps} steps"
        return f"{super().describe()} ({when}{state})"


@STRATEGIES.register("fedavg")
@method_traits(budget=sweep("period", 8, 50))
@dataclasses.dataclass(frozen=True)
class FedAvg(LocalSGD):
    """Federated averaging (McMahan et al.): rounds of `period` local steps, then the
    parameters are averaged weighted by the samples each replica saw since the last sync.

    `fraction` (C < 1) samples clients: at each sync max(1, round(C*N)) replicas, drawn
    without replacement from a key of the replicated step, are averaged; everyone adopts
    the result; the non-participants' local work of that round is discarded (in a real
    deployment they would not have trained). Their optimizer state stays local, as in
    every strategy here. `aggregator` may be any aggregator with C = 1; with C < 1 only
    "weighted" or "mean" (over participants)."""

    aggregator: Any = dataclasses.field(default="weighted", kw_only=True)
    fraction: float = 1.0
    """C: the share of replicas (clients) averaged at a sync, drawn afresh each time (1: all)"""
    seed: int = 0
    name: ClassVar[str] = "fedavg"
    context_fields: ClassVar[tuple[str, ...]] = ("total_steps", "seed")   # seed unset: the run's

    def __post_init__(self):
        if not 0.0 < float(self.fraction) <= 1.0:
            raise ValueError(f"FedAvg fraction C must be in (0, 1], got {self.fraction!r}")
        if float(self.fraction) < 1.0:   # client sampling: the aggregator draws the participants
            if self.aggregator not in ("weighted", "mean"):
                raise ValueError(f"FedAvg with client sampling (fraction={self.fraction}) averages with "
                                 f"'weighted' or 'mean', got aggregator={self.aggregator!r}")
            self.settle(aggregator=ClientSampled(fraction=float(self.fraction), base=self.aggregator,
                                                 seed=int(self.seed)))
        super().__post_init__()

    def describe(self) -> str:
        c = "" if float(self.fraction) == 1.0 else f", C={self.fraction:g}"
        return f"{super().describe()[:-1]}{c})"
