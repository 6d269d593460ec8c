"""Golden parameters: every strategy's final state, bit for bit, as recorded in tests/golden/.

A refactor must not change what any strategy computes. For every registered strategy (its
default options) and the variants that take other code paths (compression, order-statistic
and sampled aggregators, gradient sync, groups, staleness, ...), a tiny stateful model runs
K steps on a fixed batch stream, (a) 8 replicas on 8 devices and (b) 8 replicas packed on 1
device; the SHA-256 of the final params / opt_state / model_state / strategy_state bytes,
each step's `synced` / `bytes_allreduced` / `vote_bytes`, and a SHA-256 of every other
metric must equal the recorded ones exactly (a metric added later is not compared).

Regenerating (`JAXSEL_REGENERATE_GOLDEN=1 python -m pytest tests/test_golden.py`) rewrites
tests/golden/*.json. Do it only for a deliberate change of semantics, and say in the commit
message which strategies changed and why: a refactor regenerates nothing.

The values are XLA:CPU's, for the JAX version and machine recorded in each file; on another
JAX version or CPU architecture the test is skipped (it says which), since floating-point
results may legitimately differ there: regenerate on the unchanged code first, then compare.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxsel
from helpers import R, run, softmax_params
from jaxsel.strategies import STRATEGIES, build_strategy

GOLDEN = Path(__file__).parent / "golden"
REGENERATE = os.environ.get("JAXSEL_REGENERATE_GOLDEN") == "1"
B, D, C, K = 4, 6, 3, 10
CONTEXT = dict(replicas=R, total_steps=K, steps_per_epoch=5, base_lr=0.1)
LAYOUTS = {"8x1": 8, "1x8": 1}   # devices x replicas per device
REPORTED = ("synced", "bytes_allreduced", "vote_bytes")
#: the variants beyond each strategy's defaults: name -> (strategy, options)
VARIANTS = {
    "selsync-grads": ("selsync", {"aggregate": "grads", "window": 2, "delta": 0.25}),
    "selsync-median": ("selsync", {"window": 2, "delta": 0.25, "aggregator": "median"}),
    "localsgd-median": ("localsgd", {"period": 3, "aggregator": "median"}),
    "fedavg-sampled": ("fedavg", {"period": 3, "fraction": 0.5}),
    "bsp-int8": ("bsp", {"compress": "int8"}),
    "diloco-int8": ("diloco", {"inner_steps": 3, "compress": "int8"}),
    "streamingdiloco-h4": ("streamingdiloco", {"inner_steps": 4, "fragments": 2}),
    "hierarchical-groups2": ("hierarchical", {"inner": "bsp", "outer": "selsync", "groups": 2,
                                              "outer.window": 2, "outer.delta": 0.3}),
    "ssp-s2": ("ssp", {"staleness": 2}),
    "syncswitch-online": ("syncswitch", {"policy": "online", "staleness": 2}),
    "triggered-periodic-bf16": ("triggered", {"trigger": "periodic", "trigger.period": 3, "compress": "bf16"}),
}
CASES = {**{name: (name, {}) for name in sorted(STRATEGIES)}, **VARIANTS}


def loss_fn(params, model_state, batch):
    """Softmax regression on inputs centred by a running mean (the model state)."""
    mean = 0.9 * model_state["mean"] + 0.1 * batch["x"].mean(0)
    logits = (batch["x"] - mean) @ params["w"] + params["b"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]).mean(), {"mean": mean}


def batches():
    """Inputs centred on 1, so that the running mean (the model state) matters."""
    rng = np.random.default_rng(0)
    return [{"x": rng.normal(1.0, 1.0, size=(R * B, D)).astype(np.float32), "y": rng.integers(0, C, R * B)}
            for _ in range(K)]


def digest(tree) -> str:
    """SHA-256 over every leaf's dtype, shape and bytes, in tree order."""
    h = hashlib.sha256()
    for x in jax.tree.leaves(tree):
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        x = np.asarray(jax.device_get(x))
        h.update(f"{x.dtype}{x.shape}".encode())
        h.update(np.ascontiguousarray(x).tobytes())
    return h.hexdigest()


def record(strategy, devices: int) -> dict:
    """The final state's digests and the per-step metrics of K steps on `devices` devices."""
    mesh = jaxsel.data_mesh(replicas=R, devices=devices)
    state, history = run(strategy, mesh, batches(), loss=loss_fn, params=softmax_params(D, C),
                         model_state={"mean": jnp.zeros(D)}, stateful=True)
    steps = [m for _, m in history]
    out = {field: digest(getattr(state, field)) for field in ("params", "opt_state", "model_state", "strategy_state")}
    out.update({key: [np.asarray(m[key]).item() for m in steps] for key in REPORTED})
    out["metrics"] = {key: digest([m[key] for m in steps]) for key in sorted(steps[0]) if key not in REPORTED}
    return out


def environment() -> dict:
    return {"jax": jax.__version__, "machine": platform.machine()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case):
    name, options = CASES[case]
    got = {layout: record(build_strategy(name, options, **CONTEXT), devices) for layout, devices in LAYOUTS.items()}
    path = GOLDEN / f"{case}.json"
    if REGENERATE:
        GOLDEN.mkdir(exist_ok=True)
        text = json.dumps({"case": [name, options], "environment": environment(), **got}, indent=1)
        path.write_text(re.sub(r"\[[^\[\]{}]*\]", lambda m: " ".join(m[0].split()), text) + "\n")
        return
    want = json.loads(path.read_text())
    if want["environment"] != environment():
        pytest.skip(f"golden values recorded on {want['environment']}, this is {environment()}")
    assert want["case"] == [name, options]
    for layout in LAYOUTS:
        w, g = want[layout], got[layout]
        for key in ("params", "opt_state", "model_state", "strategy_state", *REPORTED):
            assert g[key] == w[key], f"{case} on {layout}: {key} differs from tests/golden/{case}.json"
        for key, value in w["metrics"].items():
            assert g["metrics"].get(key) == value, f"{case} on {layout}: metric {key!r} differs"


def test_every_strategy_has_a_golden_record():
    """A newly registered strategy gets its record (regenerate) rather than going unchecked."""
    assert sorted(p.stem for p in GOLDEN.glob("*.json")) == sorted(CASES)
