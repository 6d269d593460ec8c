"""SelSync: synchronize only when the gradient's relative change is significant."""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from ..compat.renamed_options import renamed
from ..core.budget import Budget, fires, sweep
from ..core.sync import STRATEGIES
from ..core.checks import as_float, as_int, check_int
from ..core.triggers import DEFAULT_STATISTIC, Capped, Significance
from .payload import GradientPayload
from .traits import method_traits
from .triggered import Triggered, sync_order


#: the paper's delta, the deltas that fire on 5/10/25/50 % of BSP's steps (`jaxsel calibrate`), two caps
AUTHORS_ORDER = sweep("delta", None, *(fires(f) for f in (0.05, 0.1, 0.25, 0.5))) + sweep("max_local", 8, 32)


@STRATEGIES.register("selsync")
# each point in both orders: the authors' (averaging before the update) and local SGD's (after it; issue 58)
@method_traits(budget=AUTHORS_ORDER + Budget("sync", tuple({**p, "sync": "model"} for p in AUTHORS_ORDER.grid)))
@renamed(aggregate="sync")   # the last release's name of the sync mode
@dataclasses.dataclass(frozen=True)
class SelSync(GradientPayload, Triggered):
    """Tyagi & Swany (CLUSTER'23). Each replica votes from Delta_bar, a windowed EWMA of
    the relative step-to-step change of its gradient norm (`statistic="raw"`, the form
    the authors' code keeps commented out) or of that norm's own windowed EWMA
    (`statistic="smoothed"`, what their released code computes), after `warmup` forced
    syncs (None: until Delta_bar's window is full, W-1 or 2W-1 steps); exactly as
    `core.triggers.Significance` defines them. Any vote syncs (a `psum` of the votes). A sync
    averages the parameters, then each replica applies its own update with its own
    momentum (`sync="params"`, the authors' order: their code all-reduces the parameters,
    then steps each worker's optimizer), averages the updated parameters after the update
    (`sync="model"`, local SGD's order), or averages gradients (`sync="grads"`), exactly as
    `triggered`'s `sync` says (the last release's `aggregate` is read for one more). The
    order matters on its own: before the update, each replica takes its step from the
    average with its own momentum, so the replicas disagree even when every step syncs.
    Optimizer state stays local unless `sync_opt_state` (then averaged at a sync, before
    the update); BatchNorm state unless `sync_model_state`. `max_local=K` also syncs a
    step when the K steps before it were all local (None: the paper's rule alone): the
    significance statistic picks the extra syncs, the cap bounds how far replicas drift."""

    delta: float = 0.3
    """sync when Delta_bar, the windowed EWMA of the gradient norm's relative change, reaches delta on any replica"""
    window: int = 25
    """W: steps in Delta_bar's window"""
    alpha: float = 0.01
    """smoothing rate of the windowed EWMAs, in [0, 1)"""
    statistic: str = DEFAULT_STATISTIC
    """raw: Delta_bar of the gradient norm's step-to-step change; smoothed: of its windowed EWMA's (the
    released code)"""
    warmup: int | None = None
    """forced syncs first (none: until Delta_bar's window is full, W-1 or 2W-1 steps)"""
    sync: str = "params"
    """what a sync averages: params (before the update, the authors' order: each replica then applies its own
    update), model (the updated parameters, after the update: local SGD's order) or grads"""
    max_local: int | None = None
    """K: also sync after K local steps in a row (none: the significance test alone)"""
    sync_opt_state: bool = False
    """also average the optimizer's state (momentum) at a sync, before the update (false: it stays local, as in
    the authors' code)"""
    name: ClassVar[str] = "selsync"
    # read only in the test's comparison and the cap's count (core/cell_options.py)
    cell_options: ClassVar[tuple[str, ...]] = ("delta", "max_local")

    def __post_init__(self):
        check_int("max_local", self.max_local, 1, optional=True)
        super().__post_init__()

    @property
    def trigger(self):
        significance = Significance(delta=as_float(self.delta), window=int(self.window), alpha=float(self.alpha),
                                    statistic=self.statistic, warmup=self.warmup)
        return significance if self.max_local is None else Capped(significance, as_int(self.max_local))

    def describe(self) -> str:
        warm = "" if self.warmup is None else f", warmup={self.warmup}"
        cap = "" if self.max_local is None else f", at most {self.max_local} local steps in a row"
        return (f"{super().describe()} (delta={self.delta:g}, W={self.window}, {self.statistic}{warm}{cap}, "
                f"{sync_order(self)})")
