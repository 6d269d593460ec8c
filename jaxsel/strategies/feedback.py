"""A trigger-based strategy's syncs with an error-feedback codec (top-k, sign).

What each kind of strategy compresses (`jaxsel.core.compression`):

- gradient averaging (sync="grads": BSP, SelSync aggregate="grads"): the gradients;
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

from .triggered import Synced, sync_before_update, update


class FeedbackState(NamedTuple):
    residual: Any   # this replica's residual e, params-shaped (None: error_feedback=False)
    anchor: Any     # the last synchronized parameters (None for a gradient payload)


def init_feedback(params, mode: str, error_feedback: bool) -> FeedbackState:
    zeros = jax.tree.map(jnp.zeros_like, params) if error_feedback else None
    return FeedbackState(zeros, None if mode == "grads" else params)


def residual_in(fb: FeedbackState, like) -> Any:
    """The residual the sync adds to the payload: zeros when error feedback is off."""
    return jax.tree.map(jnp.zeros_like, like) if fb.residual is None else fb.residual


def feedback_step(strategy, rs, grads, lv, ctx) -> tuple[Any, FeedbackState]:
    """One replica's step of `strategy` (one Level `lv`) with its codec's error feedback:
    (replica state, feedback state)."""
    s, fb, agg, mode = strategy, lv.state.feedback, lv.aggregate(ctx), strategy.sync
    extra = dict(model_state=rs.model_state if s.sync_model_state else None,
                 opt_state=rs.opt_state if s.sync_opt_state and mode != "model" else None)
    kept = {k: v for k, v in extra.items() if v is not None}
    if mode == "grads":
        out, res = ctx.sync(lv.decide, Synced(grads=grads, **kept), agg, compress=s.compress,
                            residual=Synced(grads=residual_in(fb, grads)))
        rs = rs.replace(**{k: getattr(out, k) for k in kept})
        return update(rs, out.grads, ctx), fb._replace(residual=_kept(fb, res.grads))
    if mode == "params":
        rs, fb = anchored_sync(rs, lv.decide, ctx, agg, fb, s.compress, kept)
        return update(rs, grads, ctx), fb
    if s.sync_opt_state:   # optimizer state before the update, exactly (as without feedback)
        rs, grads = sync_before_update(rs, grads, lv.decide, ctx, agg, what=None, opt_state=True)
    rs = update(rs, grads, ctx)
    return anchored_sync(rs, lv.decide, ctx, agg, fb, s.compress, kept)


def anchored_sync(rs, decide, ctx, agg, fb: FeedbackState, compress, kept: dict):
    """Where `decide` holds: every replica's parameters become anchor + the aggregate of
    (w_i - anchor) sent as `compress`, the new anchor (and the states in `kept`, e.g.
    model_state, their exact aggregate). Returns (replica state, feedback state)."""
    delta = jax.tree.map(jnp.subtract, rs.params, fb.anchor)

    def finish(avg: Synced, st):
        anchor = jax.tree.map(lambda a, d: (a + d).astype(a.dtype), st[1], avg.params)
        return Synced(params=anchor, **{k: getattr(avg, k) for k in kept}), anchor

    (out, anchor), res = ctx.sync(decide, Synced(params=delta, **kept), agg,
                                  state=(Synced(params=rs.params, **kept), fb.anchor), finish=finish,
                                  compress=compress, residual=Synced(params=residual_in(fb, delta)))
    rs = rs.replace(params=out.params, **{k: getattr(out, k) for k in kept})
    return rs, FeedbackState(_kept(fb, res.params), anchor)


def _kept(fb: FeedbackState, residual):
    return None if fb.residual is None else residual
