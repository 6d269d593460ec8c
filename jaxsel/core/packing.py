"""Packing: how a device loops over its packed replicas, chosen by measuring (`packing="auto"`).

Why: k replicas packed on one device can be computed several ways (`LOOPS`), and which is
fastest depends on the device, the model, k, the batch and the dtype (BENCHMARKS.md:
issue 34's H100 sweep, "Packed replicas" on CPU). So "auto" does what
`torch.backends.cudnn.benchmark` and max-autotune do: the first time a step is used on a
(device kind, per-replica gradient program, replicas per device, JAX/jaxlib version,
XLA_FLAGS) key, it times each candidate for a few steps of the real step on a copy of the
state (nothing of the run changes), keeps the fastest and caches the choice on disk
(`cache_dir()`), so the next run on that key pays nothing. The per-replica gradient
program (its StableHLO, hashed) is what the choice depends on: the model, the per-replica
batch and the dtype, not the method, so every method of a comparison shares one
measurement.

Where nothing is measured the static default holds: `STATIC` (unroll) for k > 1, the
fastest on every device measured so far. On a CPU "auto" does not measure unless asked
(`measure=True`): the figures there are settled and CPU runs are the bit-reproducible
reference (unroll and map reproduce one replica per device bit for bit; vmap only to
float32 rounding). A measured choice can differ from run to run on a GPU the way
cudnn.benchmark's can; force a loop for bit-reproducible runs.
"""
from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from .packing_setting import MEASURE_ENV, measure_setting  # noqa: F401  (MEASURE_ENV: its name, here too)

#: how a device's k packed replicas are computed (`core.step.make_train_step`)
LOOPS = ("unroll", "vmap", "map")
#: the choice where none was measured (k > 1)
STATIC = "unroll"
#: measurement: untimed steps after each candidate's compile, then timed rounds (round robin)
WARMUP, ROUNDS = 1, 5
_CACHE_ENV = "JAXSEL_CACHE_DIR"


def measures_on(platform: str) -> bool:
    """Whether "auto" measures on `platform`: $JAXSEL_PACKING_MEASURE if set ("1" / "0"),
    else on accelerators only."""
    value = measure_setting()
    return platform != "cpu" if value is None else value


def cache_dir() -> Path:
    """Where measured choices are kept: $JAXSEL_CACHE_DIR/packing, else
    $XDG_CACHE_HOME/jaxsel/packing, else ~/.cache/jaxsel/packing (beside jaxsel's datasets)."""
    root = os.environ.get(_CACHE_ENV)
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = str(Path(base) / "jaxsel")
    return Path(root).expanduser() / "packing"


@dataclasses.dataclass(frozen=True)
class PackingKey:
    """What a measured choice holds for."""

    device_kind: str
    platform: str
    per_device: int
    program: str     # SHA-256 (16 hex digits) of one replica's gradient program (StableHLO)
    jax: str
    jaxlib: str
    xla_flags: str

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(dataclasses.asdict(self), sort_keys=True).encode()).hexdigest()[:24]


def program_digest(lowered_text: str) -> str:
    return hashlib.sha256(lowered_text.encode()).hexdigest()[:16]


def make_key(device, per_device: int, program: str) -> PackingKey:
    return PackingKey(str(getattr(device, "device_kind", "?")), str(getattr(device, "platform", "?")), int(per_device),
                      program, jax.__version__, _jaxlib_version(), os.environ.get("XLA_FLAGS", ""))


def _jaxlib_version() -> str:
    import jaxlib

    return getattr(jaxlib, "__version__", "?")


@dataclasses.dataclass(frozen=True)
class Choice:
    """The loop a device's packed replicas run, and how it was chosen: "measured" (now),
    "cached" (measured by an earlier run on this key), "forced" (the user's), "static"
    (not measured), or "single" (one replica per device: nothing to choose)."""

    loop: str
    how: str
    ms: dict = dataclasses.field(default_factory=dict)        # candidate -> median ms per step
    failed: dict = dataclasses.field(default_factory=dict)    # candidate -> why it did not run
    key: PackingKey | None = None
    note: str = ""
    kept: Path | None = None   # the cache file that holds a measured choice (None: this process only)

    def describe(self) -> str:
        """The layout line's clause, e.g. "packed by unroll (measured: unroll 10.1 ms, ...)"."""
        if self.how == "single":
            return ""
        times = ", ".join(f"{name} {ms:.4g} ms" for name, ms in sorted(self.ms.items(), key=lambda kv: kv[1]))
        failed = "".join(f", {name} failed" for name in self.failed)
        why = {"measured": f"measured per step: {times}{failed}",
               "cached": f"measured earlier per step: {times}{failed}",
               "forced": "forced", "static": self.note or "static default, not measured"}[self.how]
        return f"packed by {self.loop} ({why})"

    def record(self) -> dict:
        """The run records' entry (environment.json, config.json)."""
        return {"loop": self.loop, "how": self.how, "ms_per_step": dict(self.ms), "failed": dict(self.failed),
                "key": dataclasses.asdict(self.key) if self.key else None, **({"note": self.note} if self.note else {})}


# ------------------------------------------------------------------------------ the cache

_MEMORY: dict[tuple, dict] = {}   # (folder, digest) -> entry: this process's (also where the disk is read-only)
_WARNED: set = set()


def load(key: PackingKey, directory: Path | None = None) -> dict | None:
    """The cached entry of `key` (this process's first, then the disk's), or None; an
    unreadable, corrupt or foreign file is a miss."""
    folder = directory or cache_dir()
    remembered = _MEMORY.get((str(folder), key.digest()))
    if remembered is not None:
        return remembered
    path = folder / f"{key.digest()}.json"
    try:
        entry = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not well_formed(entry, key):
        return None
    _MEMORY[(str(folder), key.digest())] = entry
    return entry


def well_formed(entry, key: PackingKey) -> bool:
    """Whether a cache file's `entry` is one `store` writes for `key`: its key, a loop of
    `LOOPS`, median milliseconds per candidate (finite numbers >= 0) and each failed
    candidate's reason (text). Anything else, field types included, is a miss: measured
    again and overwritten, never a crash of every run on that key."""
    if not isinstance(entry, dict) or entry.get("key") != dataclasses.asdict(key) or entry.get("loop") not in LOOPS:
        return False
    ms, failed = entry.get("ms_per_step", {}), entry.get("failed", {})
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < float("inf")
    return (isinstance(ms, dict) and all(k in LOOPS and number(v) for k, v in ms.items())
            and isinstance(failed, dict) and all(k in LOOPS and isinstance(v, str) for k, v in failed.items()))


def store(key: PackingKey, entry: dict, directory: Path | None = None) -> Path | None:
    """Keep `entry` for `key` (atomically); the path, or None where the cache folder cannot
    be written (one warning line per folder: a read-only home never stops a run)."""
    folder = directory or cache_dir()
    _MEMORY[(str(folder), key.digest())] = entry
    path = folder / f"{key.digest()}.json"
    tmp = folder / f".{key.digest()}.{os.getpid()}.tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(entry, indent=1, sort_keys=True))
        os.replace(tmp, path)
        return path
    except OSError as err:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        if str(folder) not in _WARNED:
            _WARNED.add(str(folder))
            print(f"jaxsel: the measured packing choice is kept for this process only: {folder} is not writable "
                  f"({err.strerror or type(err).__name__}); set {_CACHE_ENV} to a writable folder", file=sys.stderr)
        return None


def forget_in_memory() -> None:
    """Drop this process's remembered choices (tests: a new process, as far as the cache goes)."""
    _MEMORY.clear()


# ------------------------------------------------------------------------ the measurement

def wall_time(name: str, run: Callable[[], None]) -> float:
    """Seconds one blocked step of candidate `name` takes (`run` blocks)."""
    t0 = time.perf_counter()
    run()
    return time.perf_counter() - t0


def measure(runners: dict[str, Callable[[], None]], *, warmup: int = WARMUP, rounds: int = ROUNDS,
            time_step: Callable[[str, Callable[[], None]], float] = wall_time) -> tuple[dict, dict]:
    """({candidate: median ms per step}, {candidate: why it failed}): each runner's first
    step (its compile) and `warmup` more untimed, then `rounds` rounds of one timed step
    each, round robin, so that drift hits all alike. A candidate that raises (out of
    memory, say) is dropped with its error."""
    failed, alive = {}, {}
    for name, run in runners.items():
        try:
            for _ in range(1 + warmup):
                run()
            alive[name] = run
        except Exception as err:   # noqa: BLE001 - a candidate that cannot run is not chosen
            failed[name] = _why(err)
    times: dict[str, list] = {name: [] for name in alive}
    for _ in range(rounds):
        for name, run in list(alive.items()):
            try:
                times[name].append(time_step(name, run))
            except Exception as err:   # noqa: BLE001
                failed[name] = _why(err)
                del alive[name], times[name]
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}, failed


def _why(err: Exception) -> str:
    """A failed candidate's reason: the error's type and first line, at most 200 characters."""
    return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:200]


def agree(ms: dict, candidates) -> dict:
    """Every process's medians, combined as each candidate's slowest process (a step waits
    for the slowest), so that all processes choose the same loop; one process: as is."""
    if jax.process_count() == 1:
        return ms
    from jax.experimental import multihost_utils

    row = np.array([ms.get(name, np.inf) for name in candidates], np.float64)
    every = np.asarray(multihost_utils.process_allgather(row))
    worst = every.reshape(-1, len(candidates)).max(axis=0)
    return {name: float(v) for name, v in zip(candidates, worst) if np.isfinite(v)}


def agreed_entry(entry: dict | None) -> dict | None:
    """The cached entry if every process holds the same one, else None (all measure)."""
    if jax.process_count() == 1:
        return entry
    from jax.experimental import multihost_utils

    code = np.array([-1 if entry is None else LOOPS.index(entry["loop"])], np.int32)
    every = np.asarray(multihost_utils.process_allgather(code)).ravel()
    return entry if (every == every[0]).all() and every[0] >= 0 else None


def fastest(ms: dict, candidates) -> str:
    """The candidate with the least median time; ties go to the earlier in `candidates`."""
    if not ms:
        raise RuntimeError("no packing candidate ran: " + ", ".join(candidates))
    return min((name for name in candidates if name in ms), key=lambda name: (ms[name], candidates.index(name)))


# ------------------------------------------------------------------- the dispatching step

class AutoLoop:
    """`make_train_step(..., packing="auto")`'s jitted step: one jitted step per
    loop it has used (`build(loop)`), dispatched on the state's replicas per device.

    The choice for k replicas per device is made once (`decide`): k = 1 runs `single_loop`
    (nothing to choose); k > 1 where "auto" measures (`measure`, default `measures_on`
    the platform) this key's cached measurement, or a measurement now, else `STATIC`. A
    step first called or lowered inside another trace (tracers: nothing to time) takes the
    cached choice or `STATIC`: call `decide(state, batch)` first to measure there."""

    def __init__(self, build: Callable[[str], Any], program_of: Callable[[Any, Any], str], mesh, *,
                 single_loop: str, per_device: Callable[[Any], int], measure: bool | None = None,
                 candidates: tuple = LOOPS):
        self._build, self._program_of, self._mesh = build, program_of, mesh
        self._single, self._per_device, self._measure = single_loop, per_device, measure
        self.candidates = tuple(candidates)
        self._jitted: dict[str, Any] = {}
        self.choices: dict[int, Choice] = {}

    @property
    def choice(self) -> Choice | None:
        """The latest choice made (None before the first step)."""
        return next(reversed(self.choices.values()), None)

    def jitted(self, loop: str):
        if loop not in self._jitted:
            self._jitted[loop] = self._build(loop)
        return self._jitted[loop]

    def decide(self, state, batch, *, measure: bool | None = None,
               time_step: Callable[[str, Callable[[], None]], float] = wall_time,
               directory: Path | None = None, rounds: int = ROUNDS) -> Choice:
        """The loop for `state`'s replicas per device (made once per k; see the class).
        `measure`/`time_step`/`directory`/`rounds`: overrides for this call (tests)."""
        k = self._per_device(state)
        if k in self.choices:
            return self.choices[k]
        device = self._mesh.devices.flat[0]
        if k == 1:
            choice = Choice(self._single, "single")
        else:
            measure = self._measure if measure is None else measure
            if measure is None:
                measure = measures_on(device.platform)
            choice = self._choose(k, device, state, batch, bool(measure), time_step, directory, rounds)
        self.choices[k] = choice
        for loop in [name for name in self._jitted if name != choice.loop]:
            del self._jitted[loop]   # the other candidates' executables go
        return choice

    def _choose(self, k, device, state, batch, measure, time_step, directory, rounds) -> Choice:
        if not measure:   # e.g. a CPU: the static default, whatever a cache holds (reproducible runs)
            return Choice(STATIC, "static", note=f"static default on {device.platform.upper()}, not measured")
        key = make_key(device, k, self._program_of(state, batch))
        concrete = not any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((state, batch)))
        several = jax.process_count() > 1
        entry = None if several and not concrete else load(key, directory)   # processes must agree
        if several and concrete:
            entry = agreed_entry(entry)
        if entry is not None:
            return Choice(entry["loop"], "cached", dict(entry.get("ms_per_step", {})), dict(entry.get("failed", {})),
                          key, kept=(directory or cache_dir()) / f"{key.digest()}.json")
        if not concrete:
            return Choice(STATIC, "static", key=key, note="static default: first traced inside another jit, before "
                                                          "step.decide(state, batch) measured")
        ms, failed = measure_candidates(self, state, batch, time_step, rounds)
        ms = agree(ms, self.candidates)
        best = fastest(ms, self.candidates)
        kept = store(key, {"key": dataclasses.asdict(key), "loop": best, "ms_per_step": ms, "failed": failed,
                           "rounds": rounds, "measured": datetime.datetime.now(datetime.timezone.utc).isoformat()},
                     directory)
        return Choice(best, "measured", ms, failed, key, kept=kept)

    def _for(self, state, batch):
        """The jitted step of `state`'s layout, choosing first where not chosen yet."""
        k = self._per_device(state)
        choice = self.choices.get(k) or self.decide(state, batch)
        return self.jitted(choice.loop)

    def __call__(self, state, batch):
        return self._for(state, batch)(state, batch)

    def lower(self, state, batch, *args, **kwargs):
        return self._for(state, batch).lower(state, batch, *args, **kwargs)

    def __getattr__(self, name: str):
        if name.startswith("_") or name in ("choices", "candidates"):
            raise AttributeError(name)
        return getattr(self.jitted(self.choice.loop if self.choice else STATIC), name)


def measure_candidates(auto: AutoLoop, state, batch, time_step, rounds) -> tuple[dict, dict]:
    """Each candidate's real step timed on one copy of `state` (passed from step to step:
    the run's own state is untouched) and `batch`."""
    copy = [jax.tree.map(jnp.copy, state)]

    def runner(loop):
        step = auto.jitted(loop)

        def run():
            try:
                copy[0], metrics = step(copy[0], batch)
                jax.block_until_ready((copy[0], metrics))
            except Exception:
                copy[0] = jax.tree.map(jnp.copy, state)   # the failed step may have taken the donated copy
                raise
        return run

    return measure({loop: runner(loop) for loop in auto.candidates}, rounds=rounds, time_step=time_step)
