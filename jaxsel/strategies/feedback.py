"""A trigger-based strategy's syncs with an error-feedback codec (top-k, sign).

What each kind of strategy compresses (`jaxsel.core.compression`):

- gradient averaging (sync="grads": BSP, SelSync sync="grads"): the gradients;
- parameter averaging (sync="params": SelSync's default; sync="model": local SGD, FedAvg,
  superstep): the change since the last synchronized parameters, `anchor`, which every
  replica holds (initially the initial parameters). Replica i sends w_i - anchor; at a sync
  every replica becomes anchor + aggregate, the new anchor. A sparse or 1-bit summary of
  the raw weights would average to nothing meaningful; of their change, it is what
  error-feedback methods (SparseLoCo, EF-signSGD) send.

BatchNorm statistics and optimizer state synced alongside go uncompressed (exact).
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ..core import compression
from ..core.sync import local_update
from .opt_state_period import average_on_periods


class FeedbackState(NamedTuple):
    residual: Any   # this replica's residual e, params-shaped (None: error_feedback=False)
    anchor: Any     # the last synchronized parameters (None for a gradient payload)


def refuse_in_composition(compress, where: str) -> None:
    """A one-line ValueError for a top-k / sign codec inside a composition (its levels'
    residuals and anchors are not threaded through `around_update`)."""
    if compression.has_feedback(compress):
        raise ValueError(f"{where}: compress={compress!r} (error feedback) is not supported inside a "
                         f"composition (hierarchical, postlocal); use bf16 or int8 there")


def init_feedback(params, mode: str, error_feedback: bool) -> FeedbackState:
    zeros = jax.tree.map(jnp.zeros_like, params) if error_feedback else None
    return FeedbackState(zeros, None if mode == "grads" else params)


def residual_in(fb: FeedbackState, like) -> Any:
    """The residual the sync adds to the payload: zeros when error feedback is off."""
    return jax.tree.map(jnp.zeros_like, like) if fb.residual is None else fb.residual


def feedback_step(strategy, rs, grads, lv, ctx) -> tuple[Any, FeedbackState]:
    """One replica's step of `strategy` (a `Triggered`, one `Level` `lv`) with its codec's
    error feedback: (replica state, feedback state)."""
    s, fb, agg, mode = strategy, lv.state.feedback, lv.aggregate(ctx), strategy.sync
    kept = {k: getattr(rs, k) for k, on in [("model_state", s.sync_model_state),
                                            ("opt_state", s.sync_opt_state and mode != "model")] if on}
    if mode == "grads":
        out, res = ctx.sync(lv.decide, {"grads": grads, **kept}, agg, compress=s.compress,
                            residual={"grads": residual_in(fb, grads)})
        rs = rs.replace(**{k: out[k] for k in kept})
        return _update(rs, out["grads"], ctx), fb._replace(residual=_kept(fb, res["grads"]))
    if mode == "params":
        rs, fb = anchored_sync(rs, lv.decide, ctx, agg, fb, s.compress, kept)
        return _update(rs, grads, ctx), fb
    if s.sync_opt_state:   # optimizer state before the update, exactly (as without feedback)
        rs = rs.replace(opt_state=ctx.sync(lv.decide, rs.opt_state, agg))
    rs = _update(rs, grads, ctx)
    rs, fb = anchored_sync(rs, lv.decide, ctx, agg, fb, s.compress, {k: getattr(rs, k) for k in kept})
    return rs.replace(opt_state=average_on_periods(rs.opt_state, s.opt_state_period, ctx)), fb


def anchored_sync(rs, decide, ctx, agg, fb: FeedbackState, compress, kept: dict):
    """Where `decide` holds: every replica's parameters become anchor + the aggregate of
    (w_i - anchor) sent as `compress`, the new anchor (and the states in `kept`, e.g.
    model_state, their exact aggregate). Returns (replica state, feedback state)."""
    delta = jax.tree.map(jnp.subtract, rs.params, fb.anchor)

    def finish(avg: dict, st):
        anchor = jax.tree.map(lambda a, d: (a + d).astype(a.dtype), st[1], avg["params"])
        return {**avg, "params": anchor}, anchor

    (out, anchor), res = ctx.sync(decide, {"params": delta, **kept}, agg,
                                  state=({"params": rs.params, **kept}, fb.anchor), finish=finish,
                                  compress=compress, residual={"params": residual_in(fb, delta)})
    return rs.replace(**out), FeedbackState(_kept(fb, res["params"]), anchor)


def _update(rs, grads, ctx):
    params, opt_state = local_update(rs.params, rs.opt_state, grads, ctx.optimizer)
    return rs.replace(params=params, opt_state=opt_state)


def _kept(fb: FeedbackState, residual):
    return None if fb.residual is None else residual
