"""Optimizers by name (Optax), with the papers' settings expressible from the CLI."""
from __future__ import annotations

import optax

from ..core.sample_clock import SampleClock
from .lr_schedule import RunSamples, build_lr_schedule, read_lr_schedule
from .sample_epochs import sample_epoch_schedule

OPTIMIZERS = ("sgd", "adam", "adamw")


def build_optimizer(name: str = "sgd", lr: float = 0.05, momentum: float = 0.9,
                    weight_decay: float = 0.0, clip_norm: float | None = None,
                    nesterov: bool = False, lr_schedule: str = "constant",
                    total_steps: int | None = None, samples: RunSamples | None = None) -> optax.GradientTransformation:
    """SGD (coupled L2 weight decay, as PyTorch), Adam, or AdamW; optional global-norm clip.
    `lr_schedule` (see lr_schedule.py) decays `lr` over a run of `total_steps`; a
    `sample-epochs` schedule counts the run's `samples` (sample_epochs.py)."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
    if not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr!r}")
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")
    make = lambda learning_rate: _optimizer(name, learning_rate, momentum, weight_decay, clip_norm, nesterov)
    spec = read_lr_schedule(lr_schedule)
    if spec.kind != "sample-epochs":
        return make(build_lr_schedule(lr_schedule, lr, total_steps))
    if samples is None:
        raise ValueError(f"--lr-schedule {lr_schedule}: epochs counted from samples need the run's batch size, "
                         f"replicas and training-set size: build_optimizer(..., samples=RunSamples(b, N, examples))")
    b = samples.batch_size
    clock = SampleClock.start(b, b * samples.replicas, samples.epoch(spec))
    return sample_epoch_schedule(make, lr, spec.milestones, spec.gamma, clock)


def _optimizer(name: str, lr, momentum: float, weight_decay: float, clip_norm: float | None,
               nesterov: bool) -> optax.GradientTransformation:
    """The optimizer at learning rate `lr` (a number, a schedule or a traced value)."""
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
