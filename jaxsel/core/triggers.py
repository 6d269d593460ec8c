"""WHEN to synchronize: triggers evaluated on the device, inside the shard_map'd step.

`trigger(tstate, stats, axis) -> (tstate, decide, metrics)`. `stats` is a `StepStats`
(step, this replica's loss and gradient norm), so a loss- or norm-based trigger needs no
change to the step. The decision must be identical on every replica (the sync core
checks it at trace time): static triggers return a Python bool or a function of the
replicated step; data-dependent ones reduce per-replica votes across replicas (any vote
syncs). Triggers are frozen dataclasses whose fields are their options; state is a typed
pytree (a NamedTuple), never a string-keyed dict.
"""
from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .cell_options import CellOptions
from .checks import check_int, check_number, is_traced
from .collectives import replica_sum
from .registry import Registry
from .sync import StepStats


def ewma_weights(window: int, alpha: float) -> jnp.ndarray:
    """Normalised weights (1-alpha)^k, k = 1 (newest) ... window (oldest), computed on the
    device in float32 (the smoothed statistic's: its results stay what they were)."""
    w = (1.0 - alpha) ** jnp.arange(1, window + 1, dtype=jnp.float32)
    return w / jnp.sum(w)


def ewma_constant(window: int, alpha: float) -> np.ndarray:
    """The same weights worked out on the host in float64 and rounded to float32 once: a
    constant of the compiled step, which computes nothing for them (the raw statistic's)."""
    w = (1.0 - alpha) ** np.arange(1, window + 1, dtype=np.float64)
    return (w / w.sum()).astype(np.float32)


def any_replica(vote, axis: str):
    """True on every replica when any replica votes (packed replicas included). A float32
    sum, not an int32 max: XLA fuses it with the loss mean's all-reduce, so a step that
    stays local still runs one collective, as a plain local step does."""
    return replica_sum(jnp.asarray(vote).astype(jnp.float32), axis) > 0


class Trigger(CellOptions):
    """Base class. Subclasses are frozen dataclasses (fields = options)."""

    #: bytes each replica contributes to the decision's own collective (a vote), per step
    vote_bytes: ClassVar[int] = 0
    #: True when `init(params)` needs the parameters (a state shaped like them)
    takes_params: ClassVar[bool] = False

    def init(self) -> Any:
        return ()

    def __call__(self, tstate, stats: StepStats, axis: str):
        raise NotImplementedError

    def describe(self) -> str:
        fields = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self))
        return f"{type(self).__name__}({fields})"


#: triggers by name (`--opt trigger=NAME`); each registers itself below
TRIGGERS = Registry("trigger", Trigger, "jaxsel.triggers.Trigger")


@TRIGGERS.register("always")
@dataclasses.dataclass(frozen=True)
class Always(Trigger):
    """Synchronize every step (BSP)."""

    def __call__(self, tstate, stats, axis):
        return tstate, True, {}


@TRIGGERS.register("never")
@dataclasses.dataclass(frozen=True)
class Never(Trigger):
    """Never synchronize (independent replicas)."""

    def __call__(self, tstate, stats, axis):
        return tstate, False, {}


def _check_step(name: str, value, low: int) -> None:
    check_int(name, value, low)


@TRIGGERS.register("periodic")
@dataclasses.dataclass(frozen=True)
class Periodic(Trigger):
    """Synchronize after every `period` steps counted from `start`: at step t >= start
    when (t - start + 1) % period == 0.

    PyTorch's PeriodicModelAverager averages when step % period == 0 counting from 0
    (so also right after the first step); jaxsel's count means "after `period` steps".
    """

    period: int
    start: int = 0
    cell_options: ClassVar[tuple[str, ...]] = ("period",)   # read only in the modulus (core/cell_options.py)

    def __post_init__(self):
        _check_step("period", self.period, 1)
        _check_step("start", self.start, 0)

    def fires(self, step):
        due = (step - self.start + 1) % self.period == 0
        return due if not is_traced(self.start) and self.start == 0 else due & (step >= self.start)

    def __call__(self, tstate, stats, axis):
        return tstate, self.fires(stats.step), {}


def spread_steps(syncs: int, steps: int) -> np.ndarray:
    """The steps t in [0, steps) where `Spread(syncs, steps)` fires: where floor((t+1) *
    syncs / steps) steps up, so exactly `syncs` of them, evenly spread (the last step
    among them when syncs >= 1). In int64: exact for any run length the int32 step
    counter allows (T K < 2^62)."""
    t = np.arange(steps, dtype=np.int64)
    return t[(t + 1) * syncs // steps > t * syncs // steps]


@TRIGGERS.register("spread")
@dataclasses.dataclass(frozen=True)
class Spread(Trigger):
    """Synchronize on exactly `syncs` of every `steps` steps, evenly spread: at step t
    when floor((t'+1) K / T) > floor(t' K / T), t' = t mod T (K = syncs, T = steps).

    An integer period P syncs floor(T / P) times, so only some counts are reachable (600
    steps: P = 2 gives 300 syncs, P = 1 gives 600, nothing between); `Spread` reaches
    every K in 0..T. Where P divides T, `Spread(T // P, T)` fires exactly where
    `Periodic(P)` does. Beyond T steps the pattern repeats. The firing steps are worked out
    on the host in int64 (`spread_steps`) and looked up by the replicated step: (t+1) K in
    the device's int32 would overflow for long runs.

    `warmup=w` syncs the first w steps of every T and spreads the other K - w syncs over
    the T - w steps after them: the budget-matched schedule of a method with w forced
    warm-up syncs (SelSync's), so only the choice of its later syncs differs."""

    syncs: int
    steps: int
    warmup: int = 0
    """forced syncs first, counted in syncs"""

    def __post_init__(self):
        _check_step("steps", self.steps, 1)
        check_int("syncs", self.syncs, 0, int(self.steps))
        check_int("warmup", self.warmup, 0, int(self.syncs))

    def firing_steps(self) -> np.ndarray:
        """The steps in [0, steps) that sync: the warm-up, then the rest evenly spread."""
        w = int(self.warmup)
        return np.concatenate([np.arange(w), w + spread_steps(self.syncs - w, self.steps - w)]) if w else \
            spread_steps(self.syncs, self.steps)

    @property
    def cell_options(self) -> tuple[str, ...]:
        """The sync count and warm-up, where `fires` may compute the pattern on the device
        in int32 ((t+1) K < 2^31); else none (core/cell_options.py)."""
        return ("syncs", "warmup") if int(self.steps) * (int(self.syncs) + 1) < 2**31 else ()

    def fires(self, step):
        if is_traced(self.syncs) or is_traced(self.warmup):   # a cell batch's values: `firing_steps` on the device
            t, w = step % self.steps, self.warmup
            u, k, n = t - w, self.syncs - w, self.steps - w
            return (t < w) | ((u + 1) * k // n > u * k // n)
        mask = np.zeros(self.steps, bool)
        mask[self.firing_steps()] = True
        return jnp.asarray(mask)[step % self.steps]

    def __call__(self, tstate, stats, axis):
        return tstate, self.fires(stats.step), {}


@TRIGGERS.register("before")
@dataclasses.dataclass(frozen=True)
class Before(Trigger):
    """Synchronize on every step before `step` (a warm-up or first phase)."""

    step: int

    def __post_init__(self):
        _check_step("step", self.step, 0)

    def __call__(self, tstate, stats, axis):
        return tstate, stats.step < self.step, {}


@dataclasses.dataclass(frozen=True)
class AnyOf(Trigger):
    """Synchronize when any of `triggers` fires (their states kept side by side)."""

    triggers: tuple

    @property
    def vote_bytes(self) -> int:
        return sum(t.vote_bytes for t in self.triggers)

    @property
    def takes_params(self) -> bool:
        return any(t.takes_params for t in self.triggers)

    def init(self, params=None):
        return tuple(init_trigger(t, params) for t in self.triggers)

    def __call__(self, tstate, stats, axis):
        new, decide, metrics = [], False, {}
        for trig, st in zip(self.triggers, tstate):
            st, d, m = trig(st, stats, axis)
            new.append(st)
            decide = decide | d
            metrics.update(m)
        return tuple(new), decide, metrics


class SignificanceState(NamedTuple):
    """`statistic="smoothed"`'s window state."""

    t: Any            # steps seen (int32)
    s_hist: Any       # last W gradient norms, newest first
    g_prev: Any       # G_{t-1}
    d_hist: Any       # last W relative changes, newest first


class RawSignificanceState(NamedTuple):
    """`statistic="raw"`'s window state."""

    t: Any            # steps seen (int32)
    s_prev: Any       # s_{t-1}; 1.0 before the first step (the authors' prev_gradnorm)
    d_hist: Any       # last W relative changes, newest first


#: SelSync's two statistics: the released code's and its commented-out form (`Significance`)
STATISTICS = ("smoothed", "raw")
#: `Significance`'s and `SelSync`'s default statistic: the one delta = 0.3, the authors'
#: setting, fits (on plain BSP's trajectories of the default task the smoothed Delta_bar
#: never passes 0.018, the raw one passes 0.3 on 40-66 % of the steps: README, BENCHMARKS.md)
DEFAULT_STATISTIC = "raw"


def significance_fill(statistic: str, window: int) -> int:
    """The first step t at which Delta_bar's window is full: W-1 for "raw" (Delta from
    step 0), 2W-1 for "smoothed" (Delta from step W, once G has a full window)."""
    return window - 1 if statistic == "raw" else 2 * window - 1


@TRIGGERS.register("significance")
@dataclasses.dataclass(frozen=True)
class Significance(Trigger):
    """SelSync's significance test (Tyagi & Swany, CLUSTER'23), with either of the two
    statistics of the authors' code (`sahiltyagi4/SelSync`, helper/helper_fns.py), on
    each replica's s_t = grad_norm (the sum over tensors of per-tensor L2 norms), steps
    t = 0, 1, ...; EWMA_W is the windowed EWMA of the authors' `EWMAMeter`: weights
    (1-alpha)^k for k = 1 (newest) ... W (oldest), normalized, over the last W values,
    and 0 until W values have arrived.

    - `statistic="raw"` (the form `TrackModelStats.compute_gradnorm` keeps commented out,
      `# return total_gnorm`, which delta = 0.3 fits): Delta_t = |s_t - s_{t-1}| /
      max(s_{t-1}, eps) with s_{-1} = 1.0 (the authors' initial prev_gradnorm, so Delta_0
      = |s_0 - 1|), Delta_bar_t = EWMA_W(Delta)_t: 0 for t < W-1.
    - `statistic="smoothed"` (what the released code computes): G_t = EWMA_W(s)_t (t >=
      W-1), Delta_t = |G_t - G_{t-1}| / max(G_{t-1}, eps) from t = W (the released code
      takes it against G = 0 at once and divides 0 by 0 at its second step), Delta_bar_t =
      EWMA_W(Delta)_t: 0 for t < 2W-1.

    A replica votes while t < `warmup` (forced syncs) or when Delta_bar_t >= delta; any
    replica's vote syncs (a sum of the votes). `warmup=None` forces the steps before
    Delta_bar's window is full (`significance_fill`): W-1 for "raw", as the authors' loop
    (its smoothed delta is None while its 1-based step is below W), 2W-1 for "smoothed".
    The metric `delta` is Delta_bar_t where it decided, NaN on a forced step.
    """

    delta: float = 0.3
    window: int = 25
    alpha: float = 0.01
    eps: float = 1e-12
    statistic: str = DEFAULT_STATISTIC
    warmup: int | None = None
    vote_bytes: ClassVar[int] = 4  # one float32 psum per step
    cell_options: ClassVar[tuple[str, ...]] = ("delta",)   # read only in the test's comparison

    def __post_init__(self):
        check_number("delta", self.delta, positive=False)   # a traced delta (a cell batch's) passes
        _check_step("window", self.window, 1)
        if not (0.0 <= float(self.alpha) < 1.0):
            raise ValueError(f"alpha must be in [0, 1), got {self.alpha!r}")
        if self.statistic not in STATISTICS:
            raise ValueError(f"statistic must be 'smoothed' or 'raw', got {self.statistic!r}")
        check_int("warmup", self.warmup, 0, optional=True)

    @property
    def fill(self) -> int:
        """The first step with a full Delta_bar window."""
        return significance_fill(self.statistic, self.window)

    @property
    def warmup_steps(self) -> int:
        """The forced steps: `warmup`, or the steps before Delta_bar's window is full."""
        return self.fill if self.warmup is None else int(self.warmup)

    def init(self):
        w = self.window
        z = jnp.zeros((), jnp.float32)
        if self.statistic == "raw":
            return RawSignificanceState(jnp.zeros((), jnp.int32), jnp.ones((), jnp.float32),
                                        jnp.zeros((w,), jnp.float32))
        return SignificanceState(jnp.zeros((), jnp.int32), jnp.zeros((w,), jnp.float32), z,
                                 jnp.zeros((w,), jnp.float32))

    def local_vote(self, st, grad_norm):
        """The per-replica part: new window state, this replica's vote and Delta_bar (NaN
        on a forced step)."""
        s = grad_norm.astype(jnp.float32)
        if self.statistic == "raw":
            weights = ewma_constant(self.window, self.alpha)
            change = jnp.abs(s - st.s_prev) / jnp.maximum(st.s_prev, self.eps)
            d_hist = jnp.concatenate([change[None], st.d_hist[:-1]])
            new = RawSignificanceState(st.t + 1, s, d_hist)
        else:
            weights = ewma_weights(self.window, self.alpha)
            s_hist = jnp.concatenate([s[None], st.s_hist[:-1]])
            g = jnp.dot(weights, s_hist)
            change = jnp.abs(g - st.g_prev) / jnp.maximum(st.g_prev, self.eps)
            d_pushed = jnp.concatenate([change[None], st.d_hist[:-1]])
            d_hist = jnp.where(st.t >= self.window, d_pushed, st.d_hist)
            new = SignificanceState(st.t + 1, s_hist, g, d_hist)
        d_bar = jnp.dot(weights, d_hist)
        if self.warmup_steps < self.fill:   # decided on before the window is full: 0 there, as EWMAMeter
            d_bar = jnp.where(st.t >= self.fill, d_bar, 0.0)
        warm = st.t < self.warmup_steps
        vote = warm | (d_bar >= self.delta)
        return new, vote, jnp.where(warm, jnp.nan, d_bar)

    def __call__(self, tstate, stats, axis):
        new, vote, d_bar = self.local_vote(tstate, stats.grad_norm)
        return new, any_replica(vote, axis), {"delta": d_bar, "vote": vote}


class CappedState(NamedTuple):
    inner: Any        # the capped trigger's own state
    local_run: Any    # local steps in a row just before this one (int32, the same on every replica)


@dataclasses.dataclass(frozen=True)
class Capped(Trigger):
    """`inner`'s votes, plus a vote whenever the `max_local` steps before this one were
    all local: no more than `max_local` local steps run in a row, however quiet `inner`
    stays (SelSync's `max_local`). The cap joins the votes before their one reduction, so
    it costs no extra collective; the count follows the replicated decision, so every
    replica holds the same count. `inner` is a voting trigger (`local_vote`, as
    `Significance`); its state advances every step whatever was decided."""

    inner: Significance
    max_local: int

    def __post_init__(self):
        _check_step("max_local", self.max_local, 1)
        if not hasattr(self.inner, "local_vote"):
            raise ValueError(f"max_local caps a voting trigger (one with local_vote), got {type(self.inner).__name__}")

    @property
    def vote_bytes(self) -> int:
        return self.inner.vote_bytes

    def init(self):
        return CappedState(self.inner.init(), jnp.zeros((), jnp.int32))

    def __call__(self, tstate, stats, axis):
        inner, vote, d_bar = self.inner.local_vote(tstate.inner, stats.grad_norm)
        decide = any_replica(vote | (tstate.local_run >= self.max_local), axis)
        run = jnp.where(decide, 0, tstate.local_run + 1).astype(jnp.int32)
        return CappedState(inner, run), decide, {"delta": d_bar, "vote": vote}


def init_trigger(trigger: Trigger, params: Any = None) -> Any:
    """A trigger's initial state: `init(params)` where it `takes_params`, else `init()`."""
    return trigger.init(params) if trigger.takes_params else trigger.init()


class AccordionState(NamedTuple):
    accumulated: Any     # this replica's gradients summed over the current interval (float32)
    previous_norm: Any   # ||accumulated|| at the end of the previous interval; -1 before the first
    period: Any          # the current interval's period (int32; the same on every replica)


@TRIGGERS.register("accordion")
@dataclasses.dataclass(frozen=True)
class AccordionPeriod(Trigger):
    """Accordion's adaptive period (Agarwal et al., MLSys 2021), on local SGD's averaging
    (the trigger of the `jaxsel.Accordion` strategy; until issue 44 named `Accordion` too).

    Interval k is the steps k*I ... (k+1)*I - 1, run with period p_k: step t syncs when
    (t - k*I + 1) % p_k == 0 (the count restarts at each interval). Each replica sums its
    gradients over the interval (the vector sum, every floating tensor) and takes the norm
    n_k. At the interval's end a replica calls the regime critical when it has no previous
    norm (interval 0, as the authors' code), when n_{k-1} = 0, or when |n_k - n_{k-1}| /
    n_{k-1} >= eta; any replica's vote makes it critical, and p_{k+1} = low if critical
    else high. p_0 = low: training starts critical. The sync decision and the vote travel
    in one 8-byte all-reduce per step; the sum costs one parameter-sized buffer per replica.
    """

    interval: int = 100
    eta: float = 0.5
    low: int = 2
    high: int = 16
    vote_bytes: ClassVar[int] = 8
    takes_params: ClassVar[bool] = True

    def __post_init__(self):
        for name in ("interval", "low", "high"):
            _check_step(name, getattr(self, name), 1)
        if not (math.isfinite(float(self.eta)) and float(self.eta) > 0.0):
            raise ValueError(f"eta must be a finite number > 0, got {self.eta!r}")

    def init(self, params):
        zeros = jax.tree.map(lambda x: jnp.zeros(jnp.shape(x), jnp.float32), _floating(params))
        return AccordionState(zeros, jnp.float32(-1.0), jnp.int32(self.low))

    def __call__(self, tstate: AccordionState, stats, axis):
        t = stats.step
        due = (t % self.interval + 1) % tstate.period == 0
        accumulated = jax.tree.map(lambda a, g: a + g.astype(jnp.float32), tstate.accumulated, _floating(stats.grads))
        norm = jnp.sqrt(sum(jnp.sum(jnp.square(a)) for a in jax.tree.leaves(accumulated)))
        prev = tstate.previous_norm
        critical = (prev <= 0.0) | (jnp.abs(norm - prev) >= self.eta * prev)
        end = (t + 1) % self.interval == 0
        votes = replica_sum(jnp.stack([due, end & critical]).astype(jnp.float32), axis) > 0
        period = jnp.where(end, jnp.where(votes[1], self.low, self.high), tstate.period).astype(jnp.int32)
        new = AccordionState(jax.tree.map(lambda a: jnp.where(end, jnp.zeros_like(a), a), accumulated),
                             jnp.where(end, norm, prev), period)
        return new, votes[0], {"period": tstate.period}


def _floating(tree: Any) -> list:
    """The floating leaves of `tree` (what Accordion sums)."""
    return [x for x in jax.tree.leaves(tree) if jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating)]


UNKNOWN = -1   # first_sync_step of a data-dependent trigger: no promise either way


def first_sync_step(trigger) -> int | None:
    """The first step the trigger fires (None: never; UNKNOWN: depends on the data)."""
    if isinstance(trigger, Always):
        return 0
    if isinstance(trigger, Never):
        return None
    if isinstance(trigger, Periodic):
        return trigger.start + trigger.period - 1
    if isinstance(trigger, Spread):
        return int(trigger.firing_steps()[0]) if trigger.syncs else None
    if isinstance(trigger, Before):
        return 0 if trigger.step > 0 else None
    if isinstance(trigger, Capped):
        first = first_sync_step(trigger.inner)
        return first if first == UNKNOWN else min(trigger.max_local, trigger.max_local if first is None else first)
    if isinstance(trigger, AnyOf):
        firsts = [first_sync_step(t) for t in trigger.triggers]
        if UNKNOWN in firsts:
            return UNKNOWN
        known = [f for f in firsts if f is not None]
        return min(known) if known else None
    return UNKNOWN


def register_trigger(name: str, cls: type | None = None):
    """Make a user-defined trigger reachable by name (`--opt trigger=NAME` of the
    `triggered` strategy, experiment configs): `register_trigger(name, cls)` or
    `@register_trigger(name)`. `cls` is a frozen dataclass subclassing Trigger; its fields
    are its options (`--opt trigger.FIELD=VALUE`)."""
    return TRIGGERS.register(name, cls)


def get_trigger(spec, options=None) -> Trigger:
    """A trigger from its registered name and options, or itself."""
    if isinstance(spec, Trigger):
        if options:
            raise ValueError(f"trigger options {sorted(options)} given with a built trigger {spec!r}")
        return spec
    from .options import build

    if spec not in TRIGGERS:
        raise ValueError(TRIGGERS.unknown(spec))
    return build(TRIGGERS[spec], options, kind="trigger", name=spec)


#: last release's names, importable for one more: each use warns, naming the new one
RENAMED = {"Accordion": "AccordionPeriod"}


def __getattr__(name: str):
    if name in RENAMED:
        warnings.warn(f"jaxsel.triggers.{name} is renamed {RENAMED[name]} (jaxsel.Accordion is the strategy that "
                      f"runs it); the old name goes in the next release", DeprecationWarning, stacklevel=2)
        return globals()[RENAMED[name]]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
