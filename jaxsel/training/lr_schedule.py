"""Learning-rate schedules by name: constant, milestone decay, step decay, or decay at
epochs counted from samples.

SelSync's reference recipes (and most ResNet/VGG recipes) multiply the learning rate by
a factor at fixed milestones. Those are the moments gradient statistics change, which is
what SelSync's significance test reacts to, so a comparison of sync methods should be
able to include them. Milestones below 1 are fractions of the run (so a default scales
with `--steps`); whole numbers >= 1 are step numbers. `every:K` is PyTorch's StepLR
(x GAMMA every K steps: the authors' Transformer). `sample-epochs` decays at epochs as
SelSync's authors count them, from processed samples (a local step counts the replica's
batch b, a synchronized step the cluster's b*N), so where a decay falls depends on the
run's syncs: `sample_epochs.py` keeps that count on the device.

Spec grammar: "constant" | "milestones" | "milestones:M1,M2,..." | "milestones:M1,...@GAMMA"
| "every:K[@GAMMA]" | "sample-epochs:E1,E2,...[@GAMMA][/SAMPLES]".
"milestones" alone means 0.5,0.75 of the run with GAMMA 0.1; GAMMA is 0.1 unless given;
an epoch of `sample-epochs` is SAMPLES samples (default: the training set's examples).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import optax

from ..core.checks import INT32_MAX, is_numeral

DEFAULT_MILESTONES = (0.5, 0.75)
DEFAULT_GAMMA = 0.1
#: the largest factor the optimizer's float32 learning rate holds
FLOAT32_MAX = float(np.finfo(np.float32).max)
#: the kinds of schedule, for the error message and `--help`
GRAMMAR = ("'constant', 'milestones[:M1,M2,...][@GAMMA]' (M < 1: fraction of the run, M >= 1: step, "
           f"<= {INT32_MAX}; each M once), 'every:K[@GAMMA]' (x GAMMA every K steps) or "
           "'sample-epochs:E1,E2,...[@GAMMA][/SAMPLES]' (x GAMMA at each epoch E counted from samples: b per "
           "local step, b*N per synced one, SAMPLES per epoch, default the training set's; each E once); GAMMA > 0 "
           "in float32 (>= 1.4e-45); numbers in ASCII digits")


class LRSchedule(NamedTuple):
    """A parsed spec: its kind, its milestones (steps or fractions of the run; epochs for
    sample-epochs; (K,) for every), the factor, and an epoch's samples (sample-epochs with
    /SAMPLES; None: the training set's)."""

    kind: str
    milestones: tuple[float, ...]
    gamma: float
    epoch_samples: int | None = None


def read_lr_schedule(spec: str) -> LRSchedule:
    """The parsed spec; a ValueError names what is allowed."""
    allowed = f"lr_schedule must be {GRAMMAR}, got {spec!r}"
    if not isinstance(spec, str):
        raise ValueError(allowed)
    kind, colon, rest = spec.strip().partition(":")
    if kind == "constant" and not colon:
        return LRSchedule("constant", (), 1.0)
    rest, slash, samples = rest.partition("/") if kind == "sample-epochs" else (rest, "", "")
    points, at, gamma = rest.partition("@")
    if kind not in ("milestones", "every", "sample-epochs") or (colon and not points) or (at and not gamma) \
            or (kind != "milestones" and not points) or (slash and not samples):   # "milestones:", "...@", ".../"
        raise ValueError(allowed)
    if not is_numeral(rest + samples):   # '１', '1_0': Python reads them, the record would not say so
        raise ValueError(allowed)
    try:
        milestones = tuple(float(m) for m in points.split(",")) if points else DEFAULT_MILESTONES
        factor = float(gamma) if gamma else DEFAULT_GAMMA
        epoch_samples = int(samples) if slash else None
    except ValueError:
        raise ValueError(allowed) from None
    in_range = epoch_samples is None or 1 <= epoch_samples <= INT32_MAX
    if not (_valid(kind, milestones) and in_range and len(set(milestones)) == len(milestones)
            and 0 < factor <= FLOAT32_MAX and np.float32(factor) > 0):   # as float32 holds it: 1e-320 is 0 there
        raise ValueError(allowed)
    return LRSchedule(kind, milestones, factor, epoch_samples)


def _valid(kind: str, milestones: tuple[float, ...]) -> bool:
    """Steps, epochs and periods are whole numbers in 1..INT32_MAX; `milestones` also takes
    fractions of the run in (0, 1); `every` has one period."""
    whole = lambda m: math.isfinite(m) and 1 <= m <= INT32_MAX and m == int(m)
    if kind == "milestones":
        return all(whole(m) or (math.isfinite(m) and 0 < m < 1) for m in milestones)
    return all(whole(m) for m in milestones) and (kind != "every" or len(milestones) == 1)


def parse_lr_schedule(spec: str) -> tuple[str, tuple[float, ...], float]:
    """(kind, milestones, gamma) of a spec (`read_lr_schedule` without the epoch size); a
    ValueError names what is allowed."""
    return read_lr_schedule(spec)[:3]


def milestone_steps(milestones: tuple[float, ...], total_steps: int | None) -> list[int]:
    """Step numbers of the milestones (fractions of `total_steps` rounded down)."""
    steps = []
    for m in milestones:
        if m < 1:
            if total_steps is None:
                raise ValueError(f"milestone {m:g} is a fraction of the run; the run's total steps are needed")
            steps.append(max(1, int(m * total_steps)))
        else:
            steps.append(int(m))
    return sorted(steps)


def fixed_milestones_note(spec: str, first_length: int, steps: int) -> str | None:
    """What a resume to `steps` keeps of a run first `first_length` steps long whose schedule
    `spec` has fractional milestones (they stay at its steps: a resume that extends the run is
    not the longer run), as a clause of the resume's header line; None where nothing is kept."""
    kind, milestones, _ = parse_lr_schedule(spec)
    fractions = tuple(m for m in milestones if m < 1)
    if kind != "milestones" or not fractions or steps == first_length:
        return None
    at = ", ".join(map(str, milestone_steps(fractions, first_length)))
    return (f"its LR milestones {', '.join(f'{m:g}' for m in fractions)} stay fractions of the first run's "
            f"{first_length} steps (step {at}), not of {steps}: this is not the run a fresh --steps {steps} trains")


class RunSamples(NamedTuple):
    """What `sample-epochs` counts with: the per-replica batch b (a local step's samples),
    the replicas N (a synchronized step counts b*N) and the training set's examples (an
    epoch's samples unless the spec gives /SAMPLES)."""

    batch_size: int
    replicas: int
    examples: int

    def epoch(self, spec: LRSchedule) -> int:
        """The samples in one epoch of `spec`."""
        return spec.epoch_samples or self.examples


def build_lr_schedule(spec: str, lr: float, total_steps: int | None = None):
    """The learning rate as a float (constant) or an optax schedule of the step (a
    `sample-epochs` spec is no function of the step: `sample_epochs.py` builds it)."""
    kind, milestones, gamma = parse_lr_schedule(spec)
    if kind == "constant":
        return lr
    if kind == "every":
        return optax.exponential_decay(lr, int(milestones[0]), gamma, staircase=True)
    if kind == "sample-epochs":
        raise ValueError(f"--lr-schedule {spec}: epochs counted from samples follow the run's syncs, not its "
                         f"steps; build the optimizer with build_optimizer(..., samples=RunSamples(...))")
    boundaries: dict[int, float] = {}
    for s in milestone_steps(milestones, total_steps):
        boundaries[s] = boundaries.get(s, 1.0) * gamma
    return optax.piecewise_constant_schedule(lr, boundaries)


def describe_lr_schedule(spec: str, total_steps: int | None = None) -> str:
    """'constant' or 'x0.1 at steps 300, 450' for tables and plot titles."""
    parsed = read_lr_schedule(spec)
    kind, milestones, gamma = parsed[:3]
    if kind == "constant":
        return "constant lr"
    if kind == "every":
        return f"lr x{gamma:g} every {int(milestones[0])} steps"
    if kind == "sample-epochs":
        size = f"{parsed.epoch_samples}-sample" if parsed.epoch_samples else "training-set"
        return (f"lr x{gamma:g} at {size} epochs {', '.join(str(int(m)) for m in sorted(milestones))} "
                f"counted from samples (b per local step, b*N per synced step)")
    steps = milestone_steps(milestones, total_steps)
    return f"lr x{gamma:g} at steps {', '.join(str(s) for s in steps)}"


def scheduled_lr(spec: str, lr: float, total_steps: int | None, samples: RunSamples | None = None):
    """`(count, synced=0) -> learning rate` of optimizer update number `count` (0-based)
    when `synced` of the updates before it were synchronized steps, as the optimizer
    computes it (`lr` times GAMMA per milestone reached), in plain Python: the run log
    records it per step without a device call. Only `sample-epochs` reads `synced` (and
    needs the run's `samples`)."""
    parsed = read_lr_schedule(spec)
    kind, milestones, gamma = parsed[:3]
    if kind == "sample-epochs":
        if samples is None:
            raise ValueError(f"--lr-schedule {spec}: the learning rate follows the samples processed; pass the "
                             f"run's samples (RunSamples)")
        b, n, size = samples.batch_size, samples.replicas, samples.epoch(parsed)
        return lambda count, synced=0: float(lr) * gamma ** sum(
            ((count - synced) * b + synced * b * n) // size >= m for m in milestones)
    if kind == "every":
        return lambda count, synced=0: float(lr) * gamma ** (count // int(milestones[0]))
    steps = milestone_steps(milestones, total_steps) if kind != "constant" else []
    return lambda count, synced=0: float(lr) * gamma ** sum(count >= s for s in steps)


def never_fires_warning(spec: str, total_steps: int | None, steps: int,
                        samples: RunSamples | None = None) -> str | None:
    """A warning line when milestones lie at or past the run's end (`steps`), where they never
    change the learning rate (None when every milestone may fire). A `sample-epochs`
    milestone past the epochs of a run that synchronizes every step never fires."""
    parsed = read_lr_schedule(spec)
    kind, milestones, _ = parsed[:3]
    if kind == "constant":
        return None
    if kind == "sample-epochs":
        if samples is None:
            return None
        most = steps * samples.batch_size * samples.replicas // samples.epoch(parsed)
        late = sorted(int(m) for m in milestones if m > most)
        if not late:
            return None
        return (f"jaxsel: warning: --lr-schedule {spec}: epoch(s) {', '.join(map(str, late))} lie past the "
                f"{most} epochs of samples this {steps}-step run processes even if every step synchronizes, "
                f"and never change the learning rate")
    late = [s for s in milestone_steps(milestones, total_steps) if s >= steps]
    if not late:
        return None
    return (f"jaxsel: warning: --lr-schedule {spec}: milestone step(s) {', '.join(map(str, late))} lie at or past "
            f"this {steps}-step run's end and never change the learning rate")
