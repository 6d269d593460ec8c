"""Learning-rate schedules by name: constant, or milestone decay.

SelSync's reference recipes (and most ResNet/VGG recipes) multiply the learning rate by
a factor at fixed milestones. Those are the moments gradient statistics change, which is
what SelSync's significance test reacts to, so a comparison of sync methods should be
able to include them. Milestones below 1 are fractions of the run (so a default scales
with `--steps`); whole numbers >= 1 are step numbers.

Spec grammar: "constant" | "milestones" | "milestones:M1,M2,..." | "milestones:M1,...@GAMMA".
"milestones" alone means 0.5,0.75 of the run with GAMMA 0.1.
"""
from __future__ import annotations

import math

import optax

from ..core.checks import INT32_MAX

DEFAULT_MILESTONES = (0.5, 0.75)
DEFAULT_GAMMA = 0.1


def parse_lr_schedule(spec: str) -> tuple[str, tuple[float, ...], float]:
    """(kind, milestones, gamma) of a spec; a ValueError names what is allowed."""
    allowed = ("lr_schedule must be 'constant' or 'milestones[:M1,M2,...][@GAMMA]' (M < 1: fraction "
               f"of the run, M >= 1: step, <= {INT32_MAX}; each M once; GAMMA > 0), got {spec!r}")
    if not isinstance(spec, str):
        raise ValueError(allowed)
    kind, colon, rest = spec.strip().partition(":")
    if kind == "constant" and not colon:
        return "constant", (), 1.0
    points, at, gamma = rest.partition("@")
    if kind != "milestones" or (colon and not points) or (at and not gamma):   # "milestones:", "...@"
        raise ValueError(allowed)
    try:
        milestones = tuple(float(m) for m in points.split(",")) if points else DEFAULT_MILESTONES
        factor = float(gamma) if gamma else DEFAULT_GAMMA
    except ValueError:
        raise ValueError(allowed) from None
    ok = all(math.isfinite(m) and m > 0 and (m < 1 or (m == int(m) and m <= INT32_MAX)) for m in milestones)
    if not (ok and len(set(milestones)) == len(milestones) and math.isfinite(factor) and factor > 0):
        raise ValueError(allowed)
    return "milestones", milestones, factor


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


def build_lr_schedule(spec: str, lr: float, total_steps: int | None = None):
    """The learning rate as a float (constant) or an optax schedule of the step."""
    kind, milestones, gamma = parse_lr_schedule(spec)
    if kind == "constant":
        return lr
    boundaries: dict[int, float] = {}
    for s in milestone_steps(milestones, total_steps):
        boundaries[s] = boundaries.get(s, 1.0) * gamma
    return optax.piecewise_constant_schedule(lr, boundaries)


def describe_lr_schedule(spec: str, total_steps: int | None = None) -> str:
    """'constant' or 'x0.1 at steps 300, 450' for tables and plot titles."""
    kind, milestones, gamma = parse_lr_schedule(spec)
    if kind == "constant":
        return "constant lr"
    steps = milestone_steps(milestones, total_steps)
    return f"lr x{gamma:g} at steps {', '.join(str(s) for s in steps)}"


def scheduled_lr(spec: str, lr: float, total_steps: int | None):
    """`count -> learning rate` of optimizer update number `count` (0-based), as the schedule
    of `build_lr_schedule` gives it (`lr` times GAMMA per milestone reached), in plain
    Python: the run log records it per step without a device call."""
    kind, milestones, gamma = parse_lr_schedule(spec)
    steps = milestone_steps(milestones, total_steps) if kind != "constant" else []
    return lambda count: float(lr) * gamma ** sum(count >= s for s in steps)


def never_fires_warning(spec: str, total_steps: int | None, steps: int) -> str | None:
    """A warning line when milestones lie at or past the run's end (`steps`), where they never
    change the learning rate (None when every milestone fires)."""
    kind, milestones, _ = parse_lr_schedule(spec)
    late = [s for s in milestone_steps(milestones, total_steps) if s >= steps] if kind != "constant" else []
    if not late:
        return None
    return (f"jaxsel: warning: --lr-schedule {spec}: milestone step(s) {', '.join(map(str, late))} lie at or past "
            f"this {steps}-step run's end and never change the learning rate")
