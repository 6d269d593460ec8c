"""Step-time overheads of jaxsel, measured side by side in one process.

Four ratios answer "what does jaxsel's machinery cost?":
  selsync_local_over_local  a SelSync step that stays local / a plain local step: the price
                            of the on-device significance test and its 4-byte vote;
  selsync_sync_over_bsp     a SelSync step that syncs (parameter averaging) / a BSP step;
  bsp_over_minimal          jaxsel's BSP step / the hand-written shard_map + pmean SGD step
                            an expert would write: the price of the framework itself;
  async_dispatch            steps/s reading metrics every `log_every` steps / every step:
                            what asynchronous dispatch buys the training loop.
One more, without a target, locates the BSP overhead:
  bsp_lean_over_minimal     the BSP step built with `grad_norm_metric=False` / the minimal one.
Variants are warmed up (compiled) first, then timed round-robin (A B C ... A B C ...) one
blocked step at a time so drift hits all of them alike; medians are reported.
"""
from __future__ import annotations

import collections
import json
import math
import statistics
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P

from .models import FunctionalModel, build_model, count_params
from .parallel import AXIS, data_mesh, describe_layout, global_batch
from .state import init_state
from .step import make_train_step
from .strategies import BSP, SelSync, TriggeredStrategy
from .triggers import Never

RATIOS = ("selsync_local_over_local", "selsync_sync_over_bsp", "bsp_over_minimal", "async_dispatch")
INFO_RATIOS = ("bsp_lean_over_minimal",)

#: Defaults per size; explicit arguments to `run_bench` override them.
SIZES: dict[str, dict[str, Any]] = {
    "tiny": dict(batch=2, repeats=5, warmup=2, dispatch_steps=20, dispatch_repeats=2, log_every=10,
                 mlp_shape=(16,), image_shape=(8, 8, 3)),
    "default": dict(batch=32, repeats=50, warmup=5, dispatch_steps=300, dispatch_repeats=3, log_every=100,
                    mlp_shape=(784,), image_shape=(32, 32, 3)),
}

LR = 0.01
#: Queue bound of the async-dispatch loop on CPU (see `run_bench`'s max_inflight).
CPU_MAX_INFLIGHT = 8


def minimal_sgd_step(loss_fn: Callable, mesh, lr: float = LR, stateful: bool = False):
    """The baseline: what one writes by hand for data-parallel SGD with no framework.

    params / model_state carry a leading replica axis sharded P("data"); a device's k
    replicas take their gradients (vmap), the mean over them and the devices (a sum of
    the k slices, then `pmean`) updates each. Returns jitted `step(params, model_state,
    batch) -> (params, model_state, loss)`.
    """
    def local_mean(x):
        """Mean over the device's k replicas (a sum of slices) and over the devices."""
        total = x[0]
        for i in range(1, x.shape[0]):
            total = total + x[i]
        return lax.pmean(total, AXIS) / x.shape[0]

    def replica(params, model_state, batch):
        k = jax.tree.leaves(params)[0].shape[0]
        batch = jax.tree.map(lambda x: x.reshape((k, -1) + x.shape[1:]), batch)
        if stateful:
            grad = jax.value_and_grad(lambda q, ms, b: loss_fn(q, ms, b), has_aux=True)
            (loss, model_state), g = jax.vmap(grad)(params, model_state, batch)
        else:
            loss, g = jax.vmap(jax.value_and_grad(loss_fn))(params, batch)
        g = jax.tree.map(local_mean, g)
        params = jax.tree.map(lambda w, d: w - lr * d, params, g)
        return params, model_state, local_mean(loss)

    sharded = jax.shard_map(replica, mesh=mesh, in_specs=(P(AXIS), P(AXIS), P(AXIS)),
                            out_specs=(P(AXIS), P(AXIS), P()))
    return jax.jit(sharded, donate_argnums=(0, 1))


class _Runner:
    """One variant: its own state, stepped one (blocked) step at a time."""

    def __init__(self, name: str, step: Callable, state: Any, batch: Any, minimal: bool = False):
        self.name, self._step, self.state, self._batch, self._minimal = name, step, state, batch, minimal
        self.times: list[float] = []
        self.synced: list = []

    def step(self):
        if self._minimal:
            params, ms, loss = self._step(*self.state, self._batch)
            self.state = (params, ms)
            return {"loss": loss}
        self.state, metrics = self._step(self.state, self._batch)
        return metrics

    def timed_step(self) -> None:
        t0 = time.perf_counter()
        metrics = self.step()
        jax.block_until_ready((self.state, metrics))
        self.times.append(time.perf_counter() - t0)
        if "synced" in metrics:
            self.synced.append(metrics["synced"])

    def warm(self, steps: int) -> None:
        for _ in range(steps):
            jax.block_until_ready(self.step())

    def median_s(self) -> float:
        return statistics.median(self.times)


def _steps_per_s(runner: _Runner, steps: int, read_every: int, max_inflight: int | None) -> float:
    """Dispatch `steps` steps, fetching metrics to the host every `read_every` steps.

    With `max_inflight`, wait for the step that many steps back before dispatching more
    (a bounded queue, as a real loop keeps; see `run_bench`).
    """
    pending: collections.deque = collections.deque()
    t0 = time.perf_counter()
    for i in range(steps):
        metrics = runner.step()
        if (i + 1) % read_every == 0:
            jax.device_get(metrics)
            pending.clear()  # everything before it has finished too
        elif max_inflight:
            pending.append(metrics)
            if len(pending) > max_inflight:
                jax.block_until_ready(pending.popleft())
    jax.block_until_ready(runner.state)
    return steps / (time.perf_counter() - t0)


def _random_batch(input_shape, num_classes: int, n: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {"image": rng.standard_normal((n, *input_shape), dtype=np.float32),
            "label": rng.integers(0, num_classes, size=(n,), dtype=np.int32)}


def _pick(value, size: dict, key: str):
    return size[key] if value is None else value


def run_bench(
    model: str = "mlp",
    replicas: int = 8,
    batch: int | None = None,
    repeats: int | None = None,
    warmup: int | None = None,
    out_json: str | None = None,
    *,
    size: str = "default",
    input_shape: Sequence[int] | None = None,
    num_classes: int = 10,
    dispatch_steps: int | None = None,
    dispatch_repeats: int | None = None,
    log_every: int | None = None,
    max_inflight: int | None = None,
    seed: int = 0,
    verbose: bool = True,
    devices: int | None = None,
    platform: str | None = None,
) -> dict:
    """Measure jaxsel's step overheads; print a table, optionally write JSON, return a dict.

    model: a classification model of `jaxsel.models` ("mlp", "cnn", "resnet18", ...) fed
        random data of `input_shape` (default: the size's; (784,) for the MLP, else images).
    replicas / devices / platform: the layout (`jaxsel.data_mesh(replicas, devices=...,
        platform=...)`: replicas packed on the devices when there are fewer).
    batch: examples per replica per step (global batch = replicas * batch).
    repeats: timed steps per variant (medians over them); warmup: untimed steps first.
    size: "default" or "tiny" (for tests): the defaults of every None argument above.
    dispatch_steps / dispatch_repeats / log_every: the async-dispatch loop's length, how
        often it is repeated, and how often its "lazy" variant reads metrics (100).
    max_inflight: the lazy loop keeps at most this many steps queued (0 = unbounded).
        None = 8 on CPU, unbounded elsewhere: XLA's in-process CPU collectives deadlock
        (rendezvous timeout, abort) with dozens of collective steps queued on a few cores.

    Returns {"ratios": {name: float for name in RATIOS + INFO_RATIOS}, "median_step_ms": {...},
    "steps_per_s": {...}, and the settings: device_kind, platform, replicas, model, ...}.
    """
    if size not in SIZES:
        raise ValueError(f"size must be one of {', '.join(SIZES)}, got {size!r}")
    cfg = SIZES[size]
    batch = int(_pick(batch, cfg, "batch"))
    repeats = int(_pick(repeats, cfg, "repeats"))
    warmup = int(_pick(warmup, cfg, "warmup"))
    dispatch_steps = int(_pick(dispatch_steps, cfg, "dispatch_steps"))
    dispatch_repeats = int(_pick(dispatch_repeats, cfg, "dispatch_repeats"))
    log_every = int(_pick(log_every, cfg, "log_every"))
    for name, value, low in (("replicas", replicas, 1), ("batch", batch, 1), ("repeats", repeats, 1),
                             ("warmup", warmup, 1), ("dispatch_steps", dispatch_steps, 1),
                             ("dispatch_repeats", dispatch_repeats, 1), ("log_every", log_every, 1)):
        if int(value) < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if input_shape is None:
        input_shape = cfg["mlp_shape"] if model == "mlp" else cfg["image_shape"]
    input_shape = tuple(int(d) for d in input_shape)

    mesh = data_mesh(replicas, devices=devices, platform=platform)
    device = mesh.devices.flat[0]
    if max_inflight is None:
        max_inflight = CPU_MAX_INFLIGHT if device.platform == "cpu" else 0
    if int(max_inflight) < 0:
        raise ValueError(f"max_inflight must be an integer >= 0 (0 = unbounded), got {max_inflight!r}")
    fm = FunctionalModel.from_module(build_model(model, input_shape, num_classes, seed))
    loss_fn, stateful = fm.classification_loss(), fm.stateful
    data = global_batch(_random_batch(input_shape, num_classes, replicas * batch, seed), mesh)
    opt = optax.sgd(LR)

    def jaxsel_runner(name, strategy, **step_options):
        state = init_state(fm.params, opt, strategy, mesh, fm.model_state if stateful else None)
        step = make_train_step(loss_fn, opt, strategy, mesh, stateful=stateful, **step_options)
        return _Runner(name, step, state, data)

    def minimal_runner():
        put = lambda t: jax.device_put(
            jax.tree.map(lambda x: jnp.broadcast_to(x, (replicas, *jnp.shape(x))), t), NamedSharding(mesh, P(AXIS)))
        state = (put(fm.params), put(fm.model_state if stateful else {}))
        return _Runner("minimal", minimal_sgd_step(loss_fn, mesh, LR, stateful), state, data, minimal=True)

    runners = [
        # window=1: syncs only on step 0 (warm-up), then never (delta is out of reach)
        jaxsel_runner("selsync_local", SelSync(delta=1e9, window=1)),
        jaxsel_runner("local", TriggeredStrategy(trigger=Never(), sync="params", name="local")),
        jaxsel_runner("selsync_sync", SelSync(delta=0.0)),   # every step votes: always syncs
        jaxsel_runner("bsp", BSP()),
        jaxsel_runner("bsp_lean", BSP(), grad_norm_metric=False),
        minimal_runner(),
    ]
    for r in runners:
        r.warm(warmup)
    for _ in range(repeats):
        for r in runners:
            r.timed_step()
    by = {r.name: r for r in runners}
    if any(bool(s) for s in jax.device_get(by["selsync_local"].synced)):
        raise RuntimeError("the SelSync 'local' variant synchronized during timing; its ratio would be invalid")
    if not all(bool(s) for s in jax.device_get(by["selsync_sync"].synced)):
        raise RuntimeError("the SelSync 'sync' variant skipped a sync during timing; its ratio would be invalid")

    lazy, eager = [], []
    bsp = by["bsp"]
    for _ in range(dispatch_repeats):
        lazy.append(_steps_per_s(bsp, dispatch_steps, log_every, max_inflight))
        eager.append(_steps_per_s(bsp, dispatch_steps, 1, max_inflight))
    sps = {f"read_every_{log_every}": statistics.median(lazy), "read_every_1": statistics.median(eager)}

    med = {name: r.median_s() for name, r in by.items()}
    ratios = {
        "selsync_local_over_local": med["selsync_local"] / med["local"],
        "selsync_sync_over_bsp": med["selsync_sync"] / med["bsp"],
        "bsp_over_minimal": med["bsp"] / med["minimal"],
        "async_dispatch": sps[f"read_every_{log_every}"] / sps["read_every_1"],
        "bsp_lean_over_minimal": med["bsp_lean"] / med["minimal"],
    }
    result = {
        "ratios": ratios,
        "median_step_ms": {k: v * 1e3 for k, v in med.items()},
        "steps_per_s": sps,
        "device_kind": device.device_kind,
        "platform": device.platform,
        "replicas": int(replicas),
        "layout": describe_layout(mesh),
        "model": model,
        "params": count_params(fm.params),
        "input_shape": list(input_shape),
        "num_classes": int(num_classes),
        "batch_per_replica": batch,
        "global_batch": batch * int(replicas),
        "repeats": repeats,
        "warmup": warmup,
        "dispatch_steps": dispatch_steps,
        "dispatch_repeats": dispatch_repeats,
        "log_every": log_every,
        "max_inflight": int(max_inflight),
        "size": size,
        "jax_version": jax.__version__,
    }
    if verbose:
        print(format_table(result))
    if out_json:
        with open(out_json, "w") as f:
            json.dump(result, f, indent=2)
    return result


_LABELS = {
    "selsync_local": "SelSync step, stays local",
    "local": "plain local step (Never trigger)",
    "selsync_sync": "SelSync step, syncs (param avg)",
    "bsp": "BSP step (grad mean)",
    "bsp_lean": "BSP step, no grad_norm metric",
    "minimal": "hand-written shard_map + pmean SGD",
}


def format_table(result: dict) -> str:
    """The human-readable report of a `run_bench` result."""
    lines = [
        f"jaxsel bench: model={result['model']} ({result['params']:,} params) "
        f"replicas={result['replicas']} device={result['device_kind']} ({result['platform']})",
        f"layout: {result.get('layout', '?')}",
        f"batch {result['batch_per_replica']}/replica (global {result['global_batch']}), "
        f"{result['repeats']} timed steps per variant after {result['warmup']} warm-up, medians, interleaved",
        "",
        f"{'variant':38s} {'ms/step':>10s}",
    ]
    for key, label in _LABELS.items():
        lines.append(f"{label:38s} {result['median_step_ms'][key]:10.3f}")
    lines += ["", f"{'ratio':38s} {'value':>10s}"]
    for key in RATIOS + INFO_RATIOS:
        lines.append(f"{key:38s} {result['ratios'][key]:10.3f}")
    every = result["log_every"]
    lazy, eager = result["steps_per_s"][f"read_every_{every}"], result["steps_per_s"]["read_every_1"]
    lines.append(f"  (BSP steps/s reading metrics every {every} steps: {lazy:.1f}; every step: {eager:.1f})")
    return "\n".join(lines)


def ratios_ok(result: dict) -> bool:
    """True when every ratio is a positive finite number."""
    return all(math.isfinite(result["ratios"][k]) and result["ratios"][k] > 0 for k in RATIOS + INFO_RATIOS)
