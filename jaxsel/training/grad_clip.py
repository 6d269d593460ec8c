"""Gradients clipped in the backward pass, so that the method sees clipped gradients.

Why: SelSync's authors' Transformer clips each worker's gradients (`clip_grad_norm_` at
global norm 2.0) right after `loss.backward()`, before anything reads them: the
significance statistic s_t (the sum of per-tensor norms) is measured on the clipped
gradients, and the update applies them. An optimizer's own clip (`--clip-norm`, the
default `--clip-at update`) runs later, inside the update, after the method has read its
statistic and synchronized; it leaves s_t unclipped. `--clip-at gradients` clips where
the authors do, with no change to the training step: the loss's parameters pass through
an identity whose backward pass clips the whole gradient to the global norm
(`optax.clip_by_global_norm`, a `jax.custom_vjp`), so the gradients `make_train_step`
computes (and every strategy, its statistic, its gradient syncs and its update) are the
clipped ones. In your own loop (`jaxsel.as_optax`), chain the clip before the method:
`optax.chain(optax.clip_by_global_norm(c), jaxsel.as_optax(...))`.
"""
from __future__ import annotations

from typing import Callable

import jax
import optax

from ..core.checks import check_number


def clipped_backward(clip_norm: float) -> Callable:
    """`params -> params`, the identity whose backward pass clips the (whole) gradient
    arriving at it to global L2 norm `clip_norm`."""
    check_number("clip_norm", clip_norm, positive=True)
    clip = optax.clip_by_global_norm(float(clip_norm))

    @jax.custom_vjp
    def identity(params):
        return params

    def forward(params):
        return params, None

    def backward(_, grads):
        clipped, _ = clip.update(grads, clip.init(grads))
        return (clipped,)

    identity.defvjp(forward, backward)
    return identity


def with_clipped_gradients(loss_fn: Callable, clip_norm: float | None) -> Callable:
    """`loss_fn(params, *rest)` whose gradient in `params` comes out clipped to global norm
    `clip_norm` (None: `loss_fn` itself). Its value is `loss_fn`'s."""
    if clip_norm is None:
        return loss_fn
    clip = clipped_backward(clip_norm)
    return lambda params, *rest: loss_fn(clip(params), *rest)
