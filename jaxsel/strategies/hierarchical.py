"""Hierarchical (two-level) synchronization: PyTorch's HierarchicalModelAverager, generalized
to any trigger x aggregator per level.

Replicas form G groups of contiguous blocks (group g = replicas g*s ... (g+1)*s-1,
s = N/G; by default one group per process, so a group is a host's replicas on NVLink).
The Levels composition: two trigger-based strategies' syncs around one optimizer update
(`triggered.around_update`): `inner` aggregates within each group, `outer` over all
replicas, each through its own `sync_where` (its own `lax.cond`), in the order the modes
ask for (gradients and pre-update parameters before the update, post-update parameters
after it; the inner level first, so the outer's result stands).
When both levels fire on a step and sync the same thing (the same sync mode), only the
outer runs, as HierarchicalModelAverager averages with the largest period dividing the step.

Both decisions stay replicated over *all* replicas: every trigger reduces its votes over
all replicas (`triggers.any_replica`), the inner level's included, so an inner SelSync
syncs every group when any replica anywhere votes. That keeps each `lax.cond` a real
conditional taken alike everywhere (a per-group decision would need a cond per group).

Bytes per level: the step's report (built by the core from its ledger) counts both levels'
payloads and votes (`bytes_allreduced`); `synced` is the outer (all-replica) sync, since a
sync within groups is recorded as such. The metrics `group_synced` and `group_bytes` (per
replica, the inner payload without votes) give the group level; the rest crosses groups
(`costmodel.Timing.groups` tells the cost model).

Against HierarchicalModelAverager with periods {p1: group size, p2: world}:
`Hierarchical(LocalSGD(p1), LocalSGD(p2))` averages after step t (from 0) within groups
when (t+1) % p1 == 0 and over everyone when (t+1) % p2 == 0; PyTorch counts its steps from
0 instead (averaging when step % p == 0, so also right after the first step), as
PeriodicModelAverager does against `LocalSGD` (tests/test_hierarchical.py).
"""
from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp

from ..core.budget import sweep
from ..core.checks import check_int
from ..core.sync import STRATEGIES, Strategy
from .build import build_level
from .feedback import refuse_in_composition
from .traits import is_adaptive, method_traits
from .triggered import TriggeredState, around_update


class HierarchicalState(NamedTuple):
    inner: TriggeredState   # the group level's trigger state (and sample counter)
    outer: TriggeredState   # the all-replica level's


def _and_not(a, b):
    """a and not b; static (a Python bool) where the operands are."""
    if isinstance(b, (bool, int)):
        return False if b else a
    if isinstance(a, (bool, int)):
        return jnp.logical_not(b) if a else False
    return a & jnp.logical_not(b)


def _or(a, b):
    if isinstance(a, (bool, int)) and isinstance(b, (bool, int)):
        return bool(a or b)
    return jnp.logical_or(a, b)


@STRATEGIES.register("hierarchical")
# adaptive where either level is
@method_traits(budget=sweep("groups", 2, 4), adaptive=lambda s: any(is_adaptive(getattr(s, lv)) for lv in s.levels))
@dataclasses.dataclass(frozen=True)
class Hierarchical(Strategy):
    """inner: the group level (a strategy or a registered name: bsp, localsgd, fedavg,
    selsync, superstep, triggered); outer: the all-replica level; groups: G, dividing the
    replicas (None: one per process). From the CLI: `--opt inner=bsp --opt outer=selsync
    --opt groups=2 --opt outer.delta=0.2` (LEVEL.FIELD options go to that level)."""

    inner: Any = "bsp"
    """the group level: a trigger-based strategy by name (bsp, localsgd, fedavg, selsync, superstep, triggered);
    inner.FIELD=VALUE sets its options"""
    outer: Any = "selsync"
    """the all-replica level, as inner; outer.FIELD=VALUE sets its options"""
    groups: int | None = None
    """G: replica groups of the inner level, dividing the replicas (none: one per process)"""
    inner_options: dict = dataclasses.field(default_factory=dict)
    """the inner level's options (inner.FIELD=VALUE)"""
    outer_options: dict = dataclasses.field(default_factory=dict)
    """the outer level's options (outer.FIELD=VALUE)"""
    name: ClassVar[str] = "hierarchical"
    levels: ClassVar[tuple[str, ...]] = ("inner", "outer")   # fields holding a strategy

    def __post_init__(self):
        for level in self.levels:
            self.settle(**{level: build_level(level, getattr(self, level), getattr(self, f"{level}_options")),
                           f"{level}_options": {}})
            built = getattr(self, level)
            refuse_in_composition(built.compress, f"the {level} level")
            if built.aggregator.within_groups:
                raise ValueError(f"the {level} level's aggregator draws groups of its own (islands); a two-level "
                                 f"method's levels combine within its fixed groups or over everyone")
        check_int("groups", self.groups, 1, optional=True)

    def group_count(self) -> int:
        return jax.process_count() if self.groups is None else int(self.groups)

    def check_replicas(self, n: int) -> None:
        """A one-line ValueError unless the groups divide the N replicas."""
        g = self.group_count()
        if n % g:
            what = f"groups={g}" if self.groups is not None else f"one group per process ({g} processes)"
            raise ValueError(f"{what} must divide the {n} replicas (a group is a contiguous block of N/groups)")

    def init(self, params, opt_state, n):
        if n is not None:   # else checked when the step is traced
            self.check_replicas(n)
        return HierarchicalState(self.inner.init(params, opt_state, n), self.outer.init(params, opt_state, n))

    def apply(self, rs, grads, stats, ctx):
        """The Levels composition: the inner level's syncs within groups and the outer's
        over everyone, around one optimizer update (`triggered.around_update`)."""
        st: HierarchicalState = rs.strategy_state
        inner = self.inner.level(st.inner, stats, ctx, groups=self.group_count())
        outer = self.outer.level(st.outer, stats, ctx)
        same = self.inner.sync == self.outer.sync
        if same:   # both levels sync the same thing: where both fire, only the outer runs
            inner = inner._replace(decide=_and_not(inner.decide, outer.decide))
        rs = around_update(rs, grads, ctx, [inner, outer])
        ctx.log(**outer.metrics, **{f"group_{k}": v for k, v in inner.metrics.items()})
        state = HierarchicalState(inner.next_state(ctx, _or(inner.decide, outer.decide) if same else None),
                                  outer.next_state(ctx))
        return rs.replace(strategy_state=state)

    def describe(self) -> str:
        groups = "a group per process" if self.groups is None else f"{self.groups} groups"
        return f"{self.name}({self.inner.describe()} | {self.outer.describe()}, {groups})"
