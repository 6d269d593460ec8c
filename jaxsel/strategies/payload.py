"""The options of a sync's payload, declared once for every strategy that has them.

How the replicas' payloads combine (`aggregator`), whether the model's state travels with
them (`sync_model_state`), their codec (`compress`) and what a lossy codec keeps back
(`error_feedback`) mean the same in every method that syncs through `ctx.sync`. Each is
declared here with its default and its meaning (the string under it, which `jaxsel
strategies NAME` lists), and a strategy takes the set it supports by subclassing one of
these frozen, keyword-only dataclasses first:

    class LocalSGD(ModelPayload, Triggered): ...

Keyword-only, so a strategy's own fields keep their positions (`LocalSGD(4)` is still a
period of 4) and come first in its option list. The sets nest, each adding what the last
lacks: `Aggregated` (the aggregator alone: SSD-SGD's and Sync-Switch's gradient
all-reduce); `ModelSync` (and the model's state, and a codec without error feedback:
SPARTA, post-local SGD); `ModelPayload` (and error feedback: local SGD, DiLoCo, ...);
`GradientPayload` (the same, the model's state local by default: BSP, SelSync). A
strategy that sets another default redeclares that field alone, keyword-only.
"""
from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True, kw_only=True)
class Aggregated:
    """A method whose syncs combine the replicas' payloads through an aggregator."""

    aggregator: Any = "mean"
    """how the replicas' payloads combine at a sync"""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelSync(Aggregated):
    """A method that averages the model: its state (BatchNorm statistics) with it by
    default, its payload through a codec (one that needs no error feedback)."""

    sync_model_state: bool = True
    """also average the model's state (BatchNorm statistics) at a sync"""
    compress: str | None = None
    """payload codec: none, bf16, int8, topk:F (the ceil(F*size) largest entries), sign (1 bit per entry and a
    scale)"""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelPayload(ModelSync):
    """`ModelSync` with every codec: what top-k or sign leaves out is kept for the next sync."""

    error_feedback: bool = True
    """keep what topk or sign did not send as a residual added to the next payload"""


@dataclasses.dataclass(frozen=True, kw_only=True)
class GradientPayload(ModelPayload):
    """`ModelPayload` of a method that may sync gradients: the model's state stays local
    unless asked (BSP's replicas keep their own BatchNorm statistics, as data-parallel
    training does)."""

    sync_model_state: bool = False
