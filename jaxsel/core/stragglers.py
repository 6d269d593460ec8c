"""Straggler models: per-replica, per-step slowdown factors, seeded (pure NumPy).

Shared by the cost model's projections (`costmodel.Projector`, which charges them) and by
Sync-Switch's online policy (a strategy, which reacts to simulated step times drawn from
the same models and seed), so it sits below both, in the core. The cost model re-exports
it as `jaxsel.costmodel.stragglers`, part of its interface.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Sequence

import numpy as np


def check_finite(name: str, value, *, minimum: float = 0.0, strict: bool = False) -> float:
    """Return `value` as a float, or raise a ValueError naming it and the allowed range."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    bad = not math.isfinite(v) or (v <= minimum if strict else v < minimum)
    if bad:
        op = ">" if strict else ">="
        raise ValueError(f"{name} must be a finite number {op} {minimum:g}, got {value!r}")
    return v


def check_replicas(replicas) -> int:
    if isinstance(replicas, bool) or not isinstance(replicas, (int, np.integer)) or replicas < 1:
        raise ValueError(f"replicas must be an integer >= 1, got {replicas!r}")
    return int(replicas)


class Stragglers:
    """Per-replica slowdown factors (>= 0; 1 = nominal speed) for every step.

    `factors(steps, replicas, rng)` returns an array of shape (steps, replicas).
    """

    def factors(self, steps: int, replicas: int, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def describe(self) -> str:
        return type(self).__name__


@dataclasses.dataclass(frozen=True)
class NoStragglers(Stragglers):
    """Every replica at nominal speed."""

    def factors(self, steps, replicas, rng):
        return np.ones((steps, replicas))

    def describe(self):
        return "none"


@dataclasses.dataclass(frozen=True)
class FixedStragglers(Stragglers):
    """Replicas `replicas` are always `factor` times slower (a slow or shared machine)."""

    replicas: tuple[int, ...] = (0,)
    factor: float = 2.0

    def __post_init__(self):
        reps = tuple(int(r) for r in (self.replicas if isinstance(self.replicas, Iterable) else (self.replicas,)))
        if any(r < 0 for r in reps):
            raise ValueError(f"straggler replicas must be indices >= 0, got {self.replicas!r}")
        object.__setattr__(self, "replicas", reps)
        object.__setattr__(self, "factor", check_finite("straggler factor", self.factor, strict=True))

    def factors(self, steps, replicas, rng):
        out_of_range = [r for r in self.replicas if r >= replicas]
        if out_of_range:
            raise ValueError(f"straggler replicas {out_of_range} do not exist with replicas={replicas} "
                             f"(allowed: 0..{replicas - 1})")
        f = np.ones((steps, replicas))
        f[:, list(self.replicas)] = self.factor
        return f

    def describe(self):
        return f"replicas {list(self.replicas)} x{self.factor:g}"


#: the widest lognormal spread: e^10 (22000x) per standard deviation is no longer a straggler
MAX_SIGMA = 10.0


@dataclasses.dataclass(frozen=True)
class LogNormalStragglers(Stragglers):
    """Factor exp(N(0, sigma^2)) per replica per step (median 1): everyday jitter.
    With `persistent=True` one draw per replica holds for the whole run."""

    sigma: float = 0.1
    persistent: bool = False

    def __post_init__(self):
        sigma = check_finite("lognormal sigma", self.sigma)
        if sigma > MAX_SIGMA:   # exp(N(0, sigma^2)) overflows to inf (or 0) long before sigma = 1e308
            raise ValueError(f"lognormal sigma must be in [0, {MAX_SIGMA:g}] (a factor spread of e^sigma per "
                             f"standard deviation), got {self.sigma!r}")
        object.__setattr__(self, "sigma", sigma)

    def factors(self, steps, replicas, rng):
        if self.persistent:
            return np.broadcast_to(rng.lognormal(0.0, self.sigma, size=(1, replicas)), (steps, replicas)).copy()
        return rng.lognormal(0.0, self.sigma, size=(steps, replicas))

    def describe(self):
        return f"lognormal sigma={self.sigma:g}{' persistent' if self.persistent else ''}"


@dataclasses.dataclass(frozen=True)
class TransientStragglers(Stragglers):
    """Each replica, each step, independently `factor` times slower with `probability`
    (a GC pause, a noisy neighbour, a page fault storm)."""

    probability: float = 0.01
    factor: float = 5.0

    def __post_init__(self):
        p = check_finite("straggler probability", self.probability)
        if p > 1:
            raise ValueError(f"straggler probability must be in [0, 1], got {self.probability!r}")
        object.__setattr__(self, "probability", p)
        object.__setattr__(self, "factor", check_finite("straggler factor", self.factor, strict=True))

    def factors(self, steps, replicas, rng):
        hit = rng.random((steps, replicas)) < self.probability
        return np.where(hit, self.factor, 1.0)

    def describe(self):
        return f"transient p={self.probability:g} x{self.factor:g}"


def parse_stragglers(spec: str) -> Stragglers:
    """Build one straggler model from text, for command lines:
    "none", "fixed:factor=3,replicas=0+2", "lognormal:sigma=0.2[,persistent=1]",
    "transient:probability=0.01,factor=5" (p= is accepted for probability)."""
    name, _, args = str(spec).strip().partition(":")
    name = name.lower()
    kinds = {"none": NoStragglers, "fixed": FixedStragglers, "lognormal": LogNormalStragglers,
             "transient": TransientStragglers}
    if name not in kinds:
        raise ValueError(f"unknown straggler model {spec!r}; choose one of {', '.join(kinds)} "
                         f"(e.g. 'fixed:factor=2,replicas=0+1', 'lognormal:sigma=0.1', "
                         f"'transient:probability=0.01,factor=5')")
    fields = {f.name for f in dataclasses.fields(kinds[name])}
    kwargs: dict[str, Any] = {}
    for item in filter(None, (a.strip() for a in args.split(","))):
        key, eq, value = item.partition("=")
        key = {"p": "probability"}.get(key.strip(), key.strip())
        if not eq or key not in fields:
            allowed = ", ".join(sorted(fields)) or "no options"
            raise ValueError(f"bad option {item!r} in straggler spec {spec!r}; {name} takes {allowed}")
        if key == "replicas":
            try:
                kwargs[key] = tuple(int(r) for r in value.split("+"))
            except ValueError:
                raise ValueError(f"straggler replicas must be indices joined by '+', got {value!r}") from None
        elif key == "persistent":
            kwargs[key] = value.strip().lower() in ("1", "true", "yes")
        else:
            kwargs[key] = value
    return kinds[name](**kwargs)


def get_stragglers(spec) -> list[Stragglers]:
    """Normalise None / a model / text / a sequence of those into a list of models."""
    if spec is None:
        return []
    if isinstance(spec, Stragglers):
        return [spec]
    if isinstance(spec, str):
        return [parse_stragglers(spec)]
    if isinstance(spec, Sequence):
        return [m for s in spec for m in get_stragglers(s)]
    raise ValueError(f"stragglers must be None, a Stragglers model, a spec string or a list of them; got {spec!r}")


def straggler_factors(stragglers, steps: int, replicas: int, seed: int = 0) -> np.ndarray:
    """Combined (product of all models) slowdown factors, shape (steps, replicas), seeded."""
    n = check_replicas(replicas)
    if int(steps) < 0:
        raise ValueError(f"steps must be >= 0, got {steps!r}")
    rng = np.random.default_rng(seed)
    out = np.ones((int(steps), n))
    for model in get_stragglers(stragglers):
        f = np.asarray(model.factors(int(steps), n, rng), dtype=float)
        if f.shape != out.shape or not np.all(np.isfinite(f)) or np.any(f < 0):
            raise ValueError(f"straggler model {model.describe()} gave invalid factors (need finite >= 0, "
                             f"shape {out.shape})")
        out = out * f
    return out
