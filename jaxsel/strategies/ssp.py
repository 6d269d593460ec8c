"""SSP / ASP, emulated: stale gradients on lock-step collectives (see staleness.py).

Real SSP lets workers run up to s steps apart on a parameter server; here replica i
applies its own gradient at once and the others' s steps late. With a general optax
optimizer the combined gradient goes through the replica's optimizer. SSP(0) is exactly
BSP; ASP is s = N - 1. Gradients of the final s steps never reach the other replicas
(they are still "in flight" when training ends).

Relation to a parameter server: each gradient enters every replica with weight lr / N,
i.e. this is PS-ASP with a per-push learning rate of lr / N (Sync-Switch's rule for
ASP after BSP at lr). Metrics: `synced` is False for s > 0 (no replica waits on a
collective), `bytes_allreduced` counts the gradients reduced every step, `vote_bytes` 0.
Memory: s extra gradient-sized buffers per replica. There is no `aggregator` option: the
rule is a sum of every replica's gradient, not a choice among them.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from ..core.budget import Budget, sweep
from ..core.sync import STRATEGIES, Strategy, local_update
from .staleness import init_ring, resolve_staleness, stale_gradient
from .traits import method_traits


class Stale(Strategy):
    """Shared by SSP and ASP: the staleness for N replicas, and the step."""

    lr_scale: float = 1.0
    """multiplies the optimizer's updates (1.0: the formula as written)"""

    def staleness_for(self, n: int | None) -> int | None:
        raise NotImplementedError

    def check_lr_scale(self):
        if not float(self.lr_scale) > 0.0:
            raise ValueError(f"lr_scale must be a number > 0, got {self.lr_scale!r}")

    def init(self, params, opt_state, n):
        return init_ring(params, self.staleness_for(n))

    def optax_refusal(self):
        if self.staleness_for(None) is None:
            return ("its staleness s = N - 1 sizes a ring of s gradient buffers, and an optimizer's init sees one "
                    "replica, not N: use jaxsel.SSP(staleness=s) with s fixed")
        return None

    def apply(self, rs, grads, stats, ctx):
        s = self.staleness_for(ctx.n)
        if s == 0:   # exactly BSP: the same pmean
            combined, ring = ctx.sync(True, grads, "mean"), None
        else:
            combined, ring = stale_gradient(grads, rs.strategy_state, ctx, s)
        params, opt_state = local_update(rs.params, rs.opt_state, combined, ctx.optimizer, float(self.lr_scale))
        return rs.replace(params=params, opt_state=opt_state, strategy_state=ring)


@STRATEGIES.register("ssp")
@method_traits(budget=sweep("staleness", None, 4))
@dataclasses.dataclass(frozen=True)
class SSP(Stale):
    """Stale-synchronous parallel, emulated. staleness: s >= 0, or None for ASP (s = N - 1);
    lr_scale: multiplies the optimizer's updates (1.0: the formula as written)."""

    staleness: int | None = 1
    """s: a replica applies gradients up to s steps old; none: ASP's s = N - 1"""
    lr_scale: float = 1.0
    name: ClassVar[str] = "ssp"

    def __post_init__(self):
        if self.staleness is not None:
            resolve_staleness(self.staleness, 1)
        self.check_lr_scale()

    def staleness_for(self, n: int | None) -> int | None:
        """s for N replicas (None for ASP's N - 1 when N is not known)."""
        return None if self.staleness is None and n is None else resolve_staleness(self.staleness, n)


    def describe(self) -> str:
        s = "N-1" if self.staleness is None else self.staleness
        return f"{self.name} (emulated, s={s})"


@STRATEGIES.register("asp")
@method_traits(budget=Budget("none: it sends every step", ({},)))
@dataclasses.dataclass(frozen=True)
class ASP(Stale):
    """Asynchronous parallel, emulated as SSP with the largest staleness s = N - 1."""

    lr_scale: float = 1.0
    name: ClassVar[str] = "asp"

    def __post_init__(self):
        self.check_lr_scale()

    def staleness_for(self, n: int | None) -> int | None:
        return None if n is None else n - 1


    def describe(self) -> str:
        return f"{self.name} (emulated, s=N-1)"
