"""SPARTA (sparse parameter averaging): after every local step, a random fraction p of the
parameter entries is averaged across the replicas and the rest stays local; optionally with
a periodic full average (local SGD's, `period`).

Step t of replica i (counted from 0), with the replica's own optimizer:

    w_i <- optimizer step of w_i on its own gradient
    if period and (t + 1) % period == 0:   w_i <- mean_j w_j                (all entries)
    else:                                  w_i[S_t] <- mean_j w_j[S_t]      (k entries)

S_t is k = max(1, round(p * P)) of the model's P entries, a uniformly random k-subset drawn
from the run's seed and t, the same on every replica without any exchange
(`core/sparse.py` says how, and why a fixed count rather than a Bernoulli(p) draw per
entry). A step therefore sends exactly k entries in the parameters' dtype (k * 4 bytes in
float32), a full-sync step the parameters (and, with `sync_model_state`, the BatchNorm
statistics), never both: the full average overwrites what the sparse one would have set.
Every step waits on its all-reduce (however small), so every step is a sync.

The sparse sync is one `Level` whose payload is the k entries (`sparse_average`, which any
strategy can call around its own decision: DiLoCo's `sparta` option does, between its outer
steps); the full sync is a `LocalSGD(period)` level after it, as `Hierarchical` puts two
levels around one update. The aggregator (mean by default; `islands:K` averages each
island's entries) and a codec (bf16, int8) apply to both.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar, NamedTuple

import jax.numpy as jnp

from ..core import compression
from ..core.budget import sweep
from ..core.checks import MAX_SEED, check_int, is_number
from ..core.sparse import draw_entries, entry_count, put_entries, sparse_count, take_entries
from ..core.sync import STRATEGIES, ensure_replicated
from ..core.triggers import Always
from .localsgd import LocalSGD
from .payload import ModelSync
from .traits import method_traits
from .triggered import Synced, Triggered, TriggeredState, around_update


def check_fraction(name: str, fraction) -> None:
    """A one-line ValueError unless 0 < fraction <= 1."""
    if not (is_number(fraction) and 0.0 < float(fraction) <= 1.0):
        raise ValueError(f"{name} must be a number in (0, 1] (the share of parameter entries averaged per "
                         f"step), got {fraction!r}")


def sparse_average(params, decide, ctx, aggregate, fraction: float, seed: int, compress=None, groups=None):
    """`params` with a random fraction of its entries replaced by their aggregate where
    `decide` holds (the entries drawn from `seed` and the step, the same on every
    replica; `core/sparse.py`). The payload is those k entries; writing them back is work
    of the synced step only, inside the sync core's branch."""
    ensure_replicated(ctx.step, ctx.axis, who="SPARTA's shared draw of entries (from the step)")
    total = entry_count(params)
    entries = draw_entries(seed, ctx.step, total, sparse_count(fraction, total))
    sent = Synced(params=take_entries(params, entries))
    return ctx.sync(decide, sent, aggregate, state=params, compress=compress, groups=groups,
                    finish=lambda avg, p: put_entries(p, entries, avg.params))


def unless(decide, other):
    """`decide` and not `other` (static where `other` is): the sparse sync where a full one
    does not run."""
    if isinstance(other, (bool, int)):
        return False if other else decide
    return jnp.logical_and(decide, jnp.logical_not(other))


class SpartaState(NamedTuple):
    sparse: TriggeredState        # the sparse level's (its trigger fires every step)
    full: TriggeredState | None   # the periodic full average's (None without `period`)


@STRATEGIES.register("sparta")
@method_traits(budget=sweep("fraction", 0.01, 0.05) + sweep("period", 16, fraction=0.01))
@dataclasses.dataclass(frozen=True)
class SPARTA(ModelSync, Triggered):
    """fraction: p, the share of entries averaged per step; seed: of the entries' draw (unset:
    the run's); period: a full average after every `period` steps (None: never);
    aggregator, sync_model_state (at a full sync), compress (bf16 or int8): as local SGD's."""

    fraction: float = 0.05
    """p: the share of the parameters' entries averaged every step (the same random entries on every replica)"""
    seed: int = 0
    period: int | None = None
    """a full average after every `period` steps (none: never)"""
    name: ClassVar[str] = "sparta"
    sync: ClassVar[str] = "model"
    context_fields: ClassVar[tuple[str, ...]] = ("seed",)   # seed unset: the run's
    # the seed, read only as the entries' key; the full average's period, only in its modulus (core/cell_options.py)
    cell_options: ClassVar[tuple[str, ...]] = ("seed", "period")

    def __post_init__(self):
        check_fraction("fraction", self.fraction)
        check_int("seed", self.seed, 0, MAX_SEED)
        check_int("period", self.period, 1, optional=True)
        if compression.has_feedback(self.compress):
            raise ValueError(f"{self.name}: compress={self.compress!r} (error feedback) is not supported; "
                             f"use bf16 or int8")
        super().__post_init__()

    @property
    def trigger(self):
        return Always()

    @property
    def full(self) -> LocalSGD | None:
        """The periodic full average, a local SGD level (None without `period`)."""
        if self.period is None:
            return None
        return LocalSGD(period=self.period, aggregator=self.aggregator, sync_model_state=self.sync_model_state,
                        compress=self.compress)

    def init(self, params, opt_state, n):
        full = self.full
        return SpartaState(super().init(params, opt_state, n), None if full is None else full.init(params, opt_state, n))

    def apply(self, rs, grads, stats, ctx):
        st: SpartaState = rs.strategy_state
        sparse, levels = self.level(st.sparse, stats, ctx), []
        if self.full is not None:
            levels = [self.full.level(st.full, stats, ctx)]
            sparse = sparse._replace(decide=unless(sparse.decide, levels[0].decide))
        rs = around_update(rs, grads, ctx, [sparse, *levels])
        full = levels[0].next_state(ctx) if levels else None
        return rs.replace(strategy_state=SpartaState(sparse.next_state(ctx), full))

    def sync_after(self, rs, decide, ctx, agg, groups=None):
        """The sparse level's sync, after the update: k entries of the parameters."""
        return rs.replace(params=sparse_average(rs.params, decide, ctx, agg, self.fraction, self.seed,
                                                self.compress, groups))

    def describe(self) -> str:
        full = "" if self.period is None else f", full average every {self.period}"
        return f"{super().describe()} (fraction {self.fraction:g}{full})"
