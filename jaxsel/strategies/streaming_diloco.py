"""Streaming DiLoCo (Douillard et al., 2025): DiLoCo with the model split into P fragments
that synchronize at staggered steps, so each sync moves about 1/P of the model.

Fragments follow `fragments.split_leaves` (`fragment_by`: "contiguous" runs of tensors in
tree order balanced by size, or "strided"). Fragment p has the offset o_p = floor(p * H / P)
within each round of H = `period` steps and synchronizes after step t (counted from 0)
when t >= o_p and (t - o_p + 1) % H == 0: first after H + o_p local steps, then every H
steps. With P = 1 that is DiLoCo's schedule, (t + 1) % H == 0. Every step each replica
applies its inner optimizer; at fragment p's sync, through its own `sync_where`:

    delta_p    = g_p - aggregate(w_p)                  pseudo-gradient of fragment p only
    g_p       <- outer_optimizer_p(g_p, delta_p)        per-fragment outer state
    w_p       <- alpha * g_p + (1 - alpha) * w_p        alpha = 1: replaced, as in DiLoCo

The other fragments stay local. Model state (BatchNorm statistics) is averaged with
fragment 0, once per round, as DiLoCo averages it. Here the sync is not overlapped with the
next inner steps (the paper's tau = 0), so the synchronized fragment is fresh and the
default alpha = 1 replaces it; alpha < 1 keeps part of each replica's own fragment.
P = 1 with alpha = 1 is exactly DiLoCo. With `compress` (bf16, int8) each fragment's sync
sends its pseudo-gradient compressed, as DiLoCo's does.
"""
from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, NamedTuple

import jax
import optax

from ..compat.renamed_options import renamed
from ..core.budget import sweep
from ..core import compression
from ..core.aggregate import Bound
from ..core.sync import STRATEGIES, Strategy, local_update
from ..core.triggers import Periodic
from .diloco import OuterLoop
from .fragments import check_rule, put, split_leaves, take
from .traits import method_traits
from .triggered import Synced


class StreamingDiLoCoState(NamedTuple):
    global_params: Any   # the outer model, all fragments (what the run is evaluated on)
    outer_opt: tuple     # one outer optimizer state per fragment, over its tuple of leaves
    residual: Any = None # top-k / sign: this replica's error-feedback residual (all fragments)


class FragmentState(NamedTuple):
    """What fragment p's sync rewrites."""

    outer_opt: Any       # the fragment's outer optimizer state
    global_leaves: tuple
    local_leaves: tuple
    model_state: Any


@STRATEGIES.register("streamingdiloco")
@method_traits(budget=sweep("period", 8, 32),
               unsynced="no fragment's outer step: the evaluated global model stays at its initialization")
@renamed(inner_steps="period")   # the last release's name of H
@dataclasses.dataclass(frozen=True)
class StreamingDiLoCo(OuterLoop, Strategy):
    """period: H (the last release's `inner_steps` still sets it, warned); fragments: P; alpha: weight of the synchronized fragment in the
    replica's new fragment; fragment_by: "contiguous" or "strided"; the outer loop's
    options (OuterLoop; its sync_model_state averages BatchNorm statistics with fragment 0)."""

    period: int = 100
    """H: local steps between two outer steps of one fragment (the paper's inner steps)"""
    fragments: int = 2
    """P: the model's fragments, synced in turn, H/P steps apart"""
    alpha: float = 1.0
    """weight of the synced fragment in the replica's new fragment (1: replace it)"""
    fragment_by: str = "contiguous"
    """contiguous: consecutive parameter tensors per fragment; strided: every P-th"""
    name: ClassVar[str] = "streamingdiloco"
    # H, read only in the fragments' moduli and offsets: the budget points train as one program
    cell_options: ClassVar[tuple[str, ...]] = ("period",)

    def __post_init__(self):
        if isinstance(self.fragments, bool) or not isinstance(self.fragments, int) or self.fragments < 1:
            raise ValueError(f"fragments must be an integer >= 1, got {self.fragments!r}")
        Periodic(self.period)  # validates H >= 1
        if not 0.0 < float(self.alpha) <= 1.0:
            raise ValueError(f"alpha must be in (0, 1] (1: replace the fragment, as DiLoCo), got {self.alpha!r}")
        self.check_outer()
        check_rule(self.fragment_by)

    @property
    def trigger(self) -> Periodic:
        """Fragment 0's schedule: the run's first sync (the sync-horizon warning reads it)."""
        return self.fragment_trigger(0)

    def fragment_trigger(self, p: int) -> Periodic:
        return Periodic(self.period, start=self.offset(p))

    def offset(self, p: int) -> int:
        """Fragment p's first sync step less H: p H / P (0 for fragment 0, whose schedule is
        then a plain period's, a cell's H or not)."""
        return 0 if p == 0 else p * self.period // self.fragments

    def plan(self, params) -> tuple[tuple[int, ...], ...]:
        """Leaf positions of each fragment (fixed by the parameters' shapes)."""
        return split_leaves([x.size for x in jax.tree.leaves(params)], self.fragments, self.fragment_by)

    def init(self, params, opt_state, n):
        leaves = jax.tree.leaves(params)
        return StreamingDiLoCoState(params, tuple(self.outer.init(take(leaves, f)) for f in self.plan(params)),
                                    self.init_residual(params))

    def fragment_step(self, avg: Synced, fs: FragmentState) -> FragmentState:
        """On fragment p's sync: its outer step, then the blend into each replica's fragment."""
        delta = self.pseudo_gradient(fs.global_leaves, avg.params)
        updates, outer_opt = self.outer.update(delta, fs.outer_opt, fs.global_leaves)
        global_leaves = optax.apply_updates(fs.global_leaves, updates)
        local = global_leaves if float(self.alpha) == 1.0 else jax.tree.map(self.blend, global_leaves, fs.local_leaves)
        model_state = fs.model_state if avg.model_state is None else avg.model_state
        return FragmentState(outer_opt, global_leaves, local, model_state)

    def blend(self, synced, local):
        a = float(self.alpha)
        return (a * synced + (1.0 - a) * local).astype(local.dtype)

    def apply(self, rs, grads, stats, ctx):
        params, opt_state = local_update(rs.params, rs.opt_state, grads, ctx.optimizer)
        local, treedef = jax.tree.flatten(params)
        glob, gdef = jax.tree.flatten(rs.strategy_state.global_params)
        outer_opt, model_state = list(rs.strategy_state.outer_opt), rs.model_state
        res = rs.strategy_state.residual
        res, rdef = (None, None) if res is None else jax.tree.flatten(res)
        combine = Bound(self.aggregator, ctx.axis, ctx)
        for p, leaves in enumerate(self.plan(params)):
            with_model = p == 0 and self.sync_model_state
            sent = self.sent(take(glob, leaves), take(local, leaves))
            payload = Synced(params=sent, model_state=model_state if with_model else None)
            fs, fres = self.synced(ctx.sync(
                self.fragment_trigger(p).fires(stats.step), payload, combine,
                state=FragmentState(outer_opt[p], take(glob, leaves), take(local, leaves), model_state),
                finish=self.fragment_step, compress=self.compress, who=f"{self.name} fragment {p}",
                **self.feedback(None if res is None else take(res, leaves), sent)), None)
            if res is not None:
                put(res, leaves, fres)
            outer_opt[p], model_state = fs.outer_opt, fs.model_state
            put(glob, leaves, fs.global_leaves)
            put(local, leaves, fs.local_leaves)
        dstate = StreamingDiLoCoState(jax.tree.unflatten(gdef, glob), tuple(outer_opt),
                                      None if res is None else jax.tree.unflatten(rdef, res))
        return rs.replace(params=jax.tree.unflatten(treedef, local), opt_state=opt_state,
                          model_state=model_state, strategy_state=dstate)

    def describe(self) -> str:
        tags = compression.tags(self.compress, self.aggregator, self.error_feedback)
        return (f"{self.name}{tags} (H={self.period}, "
                f"P={self.fragments} {self.fragment_by}, alpha {float(self.alpha):g}, {self.outer_label()})")
