"""Optimizer state averaged on its own period (DES-LOC, Iacob et al. 2025).

Why: averaging the parameters every P steps leaves each replica's momenta (Adam's two
moments) to drift apart for the whole run; averaging them too, on periods of their own,
keeps the replicas' optimizers in step at a fraction of the bytes (a moment that changes
slowly can be averaged rarely). DES-LOC gives every optimizer state its own period.

`opt_state_period` (of LocalSGD, FedAvg and DiLoCo's inner optimizer): None keeps the
state local (the default); an integer Q averages every floating field of the optimizer
state when (t + 1) % Q == 0, after the update, like the parameters; a dict names optax
state fields with their periods, e.g. {"mu": 3 * P, "nu": 6 * P} for Adam's moments, and
the fields it does not name stay local. A name no floating field of the state has is an
error listing the fields. Integer fields (Adam's `count`) are never averaged: they are the
same on every replica.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.tree_util import GetAttrKey

from ..core.checks import check_int


def check_period(period: Any) -> Any:
    """The option checked: None, an integer >= 1, or {field name: integer >= 1}; from the
    command line also "Q" or "FIELD:Q,FIELD:Q" (e.g. "mu:12,nu:24")."""
    if period is None or period == "none":
        return None
    if isinstance(period, str):
        period = _parsed(period)
    if isinstance(period, dict):
        for name, q in period.items():
            check_int(f"opt_state_period[{name!r}]", q, 1)
        return dict(period)
    check_int("opt_state_period", period, 1)
    return period


def _parsed(text: str) -> Any:
    """"6" -> 6, "mu:12,nu:24" -> {"mu": 12, "nu": 24}."""
    if text.strip().isdigit():
        return int(text)
    pairs = [item.partition(":") for item in text.split(",")]
    if not all(colon and name.strip() and q.strip().isdigit() for name, colon, q in pairs):
        raise ValueError(f"opt_state_period must be an integer >= 1 or FIELD:Q,FIELD:Q (e.g. mu:12,nu:24), got {text!r}")
    return {name.strip(): int(q) for name, _, q in pairs}


def floating_fields(opt_state: Any) -> list[str]:
    """The names of the optimizer state's fields that hold floating tensors."""
    names = set()
    for path, leaf in jax.tree_util.tree_flatten_with_path(opt_state)[0]:
        if jnp.issubdtype(jnp.asarray(leaf).dtype, jnp.floating):
            names.update(k.name for k in path if isinstance(k, GetAttrKey))
    return sorted(names)


def check_fields(period: Any, opt_state: Any) -> None:
    """ValueError when a dict period names a field the optimizer state does not have."""
    if isinstance(period, dict):
        unknown = sorted(set(period) - set(floating_fields(opt_state)))
        if unknown:
            raise ValueError(f"opt_state_period names {', '.join(map(repr, unknown))}, not a floating field of the "
                             f"optimizer's state; its fields: {', '.join(floating_fields(opt_state)) or 'none'}")


def leaf_periods(period: Any, opt_state: Any) -> list[int | None]:
    """Per leaf of the optimizer state: the period it is averaged on (None: local)."""
    out = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(opt_state)[0]:
        if not jnp.issubdtype(jnp.asarray(leaf).dtype, jnp.floating):
            out.append(None)
        elif isinstance(period, dict):
            named = [period[k.name] for k in path if isinstance(k, GetAttrKey) and k.name in period]
            out.append(named[-1] if named else None)
        else:
            out.append(period)
    return out


def average_on_periods(opt_state: Any, period: Any, ctx, groups: int | None = None) -> Any:
    """The optimizer state after this step's averaging: each group of leaves sharing a
    period Q is averaged over all replicas (within `groups` groups: a level of
    `Hierarchical`), one sync, when (step + 1) % Q == 0."""
    if period is None:
        return opt_state
    leaves, treedef = jax.tree.flatten(opt_state)
    periods = leaf_periods(period, opt_state)
    for q in sorted({p for p in periods if p is not None}):
        chosen = [i for i, p in enumerate(periods) if p == q]
        averaged = ctx.sync((ctx.step + 1) % q == 0, [leaves[i] for i in chosen], "mean", groups=groups)
        for i, value in zip(chosen, averaged):
            leaves[i] = value
    return jax.tree.unflatten(treedef, leaves)
