"""Phases: one trigger-based strategy until a step, another after it (a composition, like
`optax.chain`: post-local SGD is `Phases(BSP(), switch_step, LocalSGD(period))`).

`first` takes part in the steps t < `until`, `then` in the steps t >= `until`, and `then`
counts its steps from `until` (its step is t - until: a `Periodic(P)` syncs after step
t when (t - until + 1) % P == 0). Both levels' syncs sit around the one optimizer update
(`triggered.around_update`); a level's state (trigger windows, sample counts) advances
only in its own phase, so `then` starts fresh at the switch.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

from ..core.checks import check_int
from ..core.sync import Strategy
from .traits import is_adaptive, method_traits
from .triggered import Triggered, TriggeredState, around_update


class PhasesState(NamedTuple):
    first: TriggeredState
    then: TriggeredState


# adaptive where either phase is
@method_traits(adaptive=lambda s: is_adaptive(s.first) or is_adaptive(s.then))
@dataclasses.dataclass(frozen=True)
class Phases(Strategy):
    """first: the strategy of steps t < until; then: of steps t >= until (see the module
    docstring). Both are trigger-based strategies (`Triggered`)."""

    first: Triggered
    until: int
    then: Triggered

    def __post_init__(self):
        check_int("until", self.until, 0)
        for what in ("first", "then"):
            if not isinstance(getattr(self, what), Triggered):
                raise ValueError(f"Phases {what} must be a trigger-based strategy, got {getattr(self, what)!r}")

    def init(self, params, opt_state, n):
        return PhasesState(self.first.init(params, opt_state, n), self.then.init(params, opt_state, n))

    def apply(self, rs, grads, stats, ctx):
        st: PhasesState = rs.strategy_state
        before = stats.step < self.until
        after = stats.step >= self.until
        first = self.first.level(st.first, stats, ctx, gate=before)
        then = self.then.level(st.then, stats._replace(step=stats.step - self.until), ctx, gate=after)
        rs = around_update(rs, grads, ctx, [first, then])
        ctx.log(**first.metrics, **then.metrics)
        return rs.replace(strategy_state=PhasesState(first.next_state(ctx, active=before),
                                                     then.next_state(ctx, active=after)))

    def describe(self) -> str:
        return f"{self.first.describe()} until step {self.until}, then {self.then.describe()}"
