"""A golden run's portable record: what it computed, summarised so that it holds on any JAX
release and any CPU, where the exact record beside it (SHA-256 of every byte) holds only in
the environment that wrote it (tests/test_golden.py).

Exact, everywhere: every integer per-step metric (each step's `synced`, `bytes_allreduced`,
`vote_bytes`), each leaf's dtype and shape, and every integer leaf of the final state (step
counters, PRNG keys' data, indices) by its sum and its values at fixed positions: rounding
never changes an integer, and a changed period, schedule or draw changes one.

To RTOL, relative to a scale, everywhere: each float leaf of the final params, opt_state,
model_state and strategy_state by its float64 sum (scale: its L1 norm, so that a sum that
cancels to near zero is not held to its own size), its L1 and L2 norms (scale: themselves)
and its values at the first, middle and last position (scale: its L2 norm); and each float
per-step metric (loss, grad_norm, ...) by its float64 sum over replicas, step by step (scale:
the largest of those over the run). XLA:CPU on another JAX, CPU or flag set sums in another
order and fuses multiply-adds differently: that moves these by float32 rounding, which RTOL
absorbs; a changed strategy constant (a momentum, a threshold, a learning-rate factor) moves
them by orders of magnitude more, or changes a decision.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

#: The largest difference allowed, relative to a quantity's scale (see above): ten times the
#: largest cross-environment difference measured, 2.84e-7 (ssdsgd on 4x2, the sum of the
#: params' `b`; next diloco-sparta's global `b` 2.7e-7, SelSync's `delta` 2.5e-7, a loss
#: 2.0e-7), float32 rounding. Measured on every case and every layout it runs (144 runs),
#: JAX 0.10.2 (jaxlib 0.10.2 with its suite flags: classic emitters, LLVM level 0) against
#: JAX 0.12.1 (jaxlib 0.12.1: LLVM level 1 without expensive passes), both on the 2-core
#: AMD EPYC with AVX2 and no AVX-512 (no AVX-512 machine was at hand): every integer
#: quantity and decision agreed exactly. Command: tests/measure/golden_spread.py (a run in
#: each environment, then the comparison). XLA's default flags, on either jaxlib (every
#: case on 8x1, an environment without an exact record), came within 2.83e-7 of the records.
#: For scale, the packed layouts differ from 8x1 by up to 3.4e-7, except the bf16 payload's
#: (4.4e-4): hence a record per layout.
RTOL = 3e-6
#: A difference this small counts as none: a leaf that is only rounding residue has no
#: scale of its own (DeMo's momentum once every component is sent: L2 norm 5e-10, its
#: summaries differ by up to 6.2e-10 between the same two environments, ~100% of
#: themselves), and a leaf of zeros has scale 0. Every other float leaf's L2 norm in the
#: records is above 0.35.
ATOL = 1e-8
#: the final state's fields a record summarises
STATE_FIELDS = ("params", "opt_state", "model_state", "strategy_state")
#: digits written to the file: far finer than RTOL, and the file stays readable
DIGITS = 12
#: the float summary of a leaf, in order: sum, L1 norm, L2 norm, values at fixed positions
FLOAT_SUMMARY = ("sum", "l1", "l2")


def host_array(leaf) -> np.ndarray:
    """A leaf on the host as NumPy (a PRNG key by its data)."""
    if jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        leaf = jax.random.key_data(leaf)
    return np.asarray(jax.device_get(leaf))


def is_exact(x: np.ndarray) -> bool:
    """Integers and booleans are compared exactly."""
    return x.dtype == bool or np.issubdtype(x.dtype, np.integer)


def positions(size: int) -> list[int]:
    """The fixed positions of a flattened leaf whose values a record keeps."""
    return sorted({0, size // 2, size - 1}) if size else []


def rounded(value: float) -> float:
    return float(f"{value:.{DIGITS}g}")


def leaf_summary(x: np.ndarray) -> list:
    """[sum, values at positions()] of an integer leaf; [sum, L1, L2, values at positions()]
    of a float one, in float64."""
    flat = x.reshape(-1)
    if is_exact(x):
        return [int(flat.astype(np.int64).sum()), *(int(flat[i]) for i in positions(flat.size))]
    f = flat.astype(np.float64)
    return [rounded(v) for v in (f.sum(), np.abs(f).sum(), np.sqrt((f * f).sum()), *f[positions(f.size)])]


def tree_summary(tree) -> dict:
    """'path dtype shape' -> leaf_summary, for every leaf of `tree`."""
    out = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        x = host_array(leaf)
        out[f"{jax.tree_util.keystr(path, simple=True, separator='/')} {x.dtype}{list(x.shape)}"] = leaf_summary(x)
    return out


def step_summary(steps: list[dict]) -> dict:
    """Each per-step metric, step by step: an integer one's sum over replicas exactly (a
    scalar's value), a float one's float64 sum over replicas."""
    out = {}
    for key in sorted(steps[0]):
        values = [np.asarray(jax.device_get(m[key])) for m in steps]
        if is_exact(values[0]):
            out[key] = [int(v.astype(np.int64).sum()) for v in values]
        else:
            out[key] = [rounded(v.astype(np.float64).sum()) for v in values]
    return out


def portable_record(state, steps: list[dict]) -> dict:
    """The run's portable record: its per-step metrics and its final state's summaries."""
    return {"steps": step_summary(steps), **{field: tree_summary(getattr(state, field)) for field in STATE_FIELDS}}


def leaf_scales(want: list) -> list[float]:
    """The scale of each quantity of a float leaf's summary (see the module's docstring)."""
    total, l1, l2, *at = want
    return [l1, l1, l2, *[l2] * len(at)]


def relative_differences(got: dict, want: dict) -> dict[str, float]:
    """'where' -> |got - want| / scale of every float quantity of two portable records
    (inf where an exact quantity differs or a leaf or metric is missing). A metric only
    `got` has (added later) is not compared."""
    out = {}
    for key, w in want["steps"].items():
        g = got["steps"].get(key)
        if g is None or len(g) != len(w):
            out[f"steps/{key}"] = np.inf
        elif all(isinstance(v, int) for v in w):
            out[f"steps/{key}"] = 0.0 if g == w else np.inf
        else:
            scale = max((abs(v) for v in w if np.isfinite(v)), default=0.0)
            out.update({f"steps/{key}[{t}]": ratio(a, b, scale) for t, (a, b) in enumerate(zip(g, w))})
    for field in STATE_FIELDS:
        for leaf in sorted({*got[field], *want[field]}):
            g, w = got[field].get(leaf), want[field].get(leaf)
            if g is None or w is None or len(g) != len(w):
                out[f"{field}/{leaf}"] = np.inf
            elif all(isinstance(v, int) for v in w):
                out[f"{field}/{leaf}"] = 0.0 if g == w else np.inf
            else:
                names = [*FLOAT_SUMMARY, *(f"at{i}" for i in range(len(w) - len(FLOAT_SUMMARY)))]
                out.update({f"{field}/{leaf} {name}": ratio(a, b, scale)
                            for name, a, b, scale in zip(names, g, w, leaf_scales(w))})
    return out


def ratio(got: float, want: float, scale: float) -> float:
    """|got - want| relative to `scale`; 0 within ATOL, inf beyond it at scale 0 (or NaN).
    A NaN or infinity (SelSync's `delta` before its window fills) is held exactly."""
    if not (np.isfinite(got) and np.isfinite(want)):
        return 0.0 if got == want or (np.isnan(got) and np.isnan(want)) else np.inf
    difference = abs(got - want)
    if difference <= ATOL:
        return 0.0
    return difference / scale if scale > 0 else np.inf


def assert_portable_record(got: dict, want: dict, where: str) -> None:
    """Every quantity of `got` within RTOL of `want` (integers exactly), else the worst ones."""
    beyond = {k: v for k, v in relative_differences(got, want).items() if v > RTOL}
    worst = sorted(beyond.items(), key=lambda kv: -kv[1])[:5]
    assert not beyond, (f"{where}: {len(beyond)} quantities differ from the portable record beyond RTOL {RTOL} "
                        f"(relative difference; inf: an exact one or a missing leaf): {worst}")
