"""Optimizers by name (Optax), with the papers' settings expressible from the CLI."""
from __future__ import annotations

import optax

from .lr_schedule import build_lr_schedule

OPTIMIZERS = ("sgd", "adam", "adamw")


def build_optimizer(name: str = "sgd", lr: float = 0.05, momentum: float = 0.9,
                    weight_decay: float = 0.0, clip_norm: float | None = None,
                    nesterov: bool = False, lr_schedule: str = "constant",
                    total_steps: int | None = None) -> optax.GradientTransformation:
    """SGD (coupled L2 weight decay, as PyTorch), Adam, or AdamW; optional global-norm clip.
    `lr_schedule` (see lr_schedule.py) decays `lr` over a run of `total_steps`."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
    if not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr!r}")
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")
    lr = build_lr_schedule(lr_schedule, lr, total_steps)
    parts = []
    if clip_norm:
        parts.append(optax.clip_by_global_norm(clip_norm))
    if name == "sgd":
        if weight_decay:
            parts.append(optax.add_decayed_weights(weight_decay))
        parts.append(optax.sgd(lr, momentum=momentum or None, nesterov=nesterov))
    elif name == "adam":
        if weight_decay:
            parts.append(optax.add_decayed_weights(weight_decay))
        parts.append(optax.adam(lr))
    else:
        parts.append(optax.adamw(lr, weight_decay=weight_decay))
    return optax.chain(*parts) if len(parts) > 1 else parts[0]
