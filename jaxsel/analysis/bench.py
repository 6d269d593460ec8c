"""Step-time overheads of jaxsel, measured side by side in one process.

Four ratios answer "what does jaxsel's machinery cost?":
  selsync_local_over_local  a SelSync step that stays local / a plain local step: the price
                            of the on-device significance test and its 4-byte vote;
  selsync_sync_over_bsp     a SelSync step that syncs (parameter averaging) / a BSP step;
  bsp_over_minimal          jaxsel's BSP step / the hand-written shard_map + pmean SGD step
                            an expert would write: the price of the framework itself;
  async_dispatch            steps/s reading metrics every `log_every` steps / every step:
                            what asynchronous dispatch buys the training loop.
and, with `packed` replicas (default 8) on one device (the accelerator's, or CPU device 0):
  packed_selsync_local_over_local  the first ratio with the replicas packed on one device.
One more, without a target, locates the BSP overhead:
  bsp_lean_over_minimal     the BSP step built with `grad_norm_metric=False` / the minimal one.
Variants are warmed up (compiled) first, then timed round-robin (A B C ... A B C ...) one
blocked step at a time so drift hits all of them alike; medians are reported.

`dtype="bf16"` runs every variant in the mixed precision the throughput script uses
(`jaxsel.analysis.precision`: bf16 compute, fp32 parameters and optimizer state). `hlo=True` also
counts each variant's compiled program (fusions and other ops of its entry computation:
on a GPU each is about one kernel launch), which is where a fixed per-step cost shows.
"""
from __future__ import annotations

import collections
import json
import math
import re
import statistics
import sys
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P

from ..core.pacing import queue_limit
from ..core.parallel import AXIS, Layout, choose_layout, global_batch
from ..core.state import init_state
from ..core.step import check_local_replicas, make_train_step
from ..core.triggers import Never
from ..models import count_params
from ..strategies import BSP, SelSync, TriggeredStrategy
from . import precision

RATIOS = ("selsync_local_over_local", "selsync_sync_over_bsp", "bsp_over_minimal", "async_dispatch")
PACKED_RATIOS = ("packed_selsync_local_over_local",)
INFO_RATIOS = ("bsp_lean_over_minimal",)
#: ratios `jaxsel bench` holds to TARGET (async_dispatch has none: higher is better)
TARGETED = ("selsync_local_over_local", "selsync_sync_over_bsp", "bsp_over_minimal") + PACKED_RATIOS
TARGET = 1.02
PACKED = 8   # replicas of the packed-replica row (on one device)

#: Defaults per size; explicit arguments to `run_bench` override them.
SIZES: dict[str, dict[str, Any]] = {
    "tiny": dict(batch=2, repeats=5, warmup=2, dispatch_steps=20, dispatch_repeats=2, log_every=10,
                 mlp_shape=(16,), image_shape=(8, 8, 3)),
    "default": dict(batch=32, repeats=50, warmup=5, dispatch_steps=300, dispatch_repeats=3, log_every=100,
                    mlp_shape=(784,), image_shape=(32, 32, 3)),
}

LR = 0.01


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

    def compiled_text(self) -> str:
        """The optimized HLO of this variant's step (as XLA compiled it for its devices)."""
        args = (*self.state, self._batch) if self._minimal else (self.state, self._batch)
        return self._step.lower(*args).compile().as_text()


#: entry-computation instructions that launch no work of their own
_FREE_OPS = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast"}
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?[\w.\-]+ = [^=]*?\s([a-z][a-z\-]*)\((.*)$", re.M)
#: what a variant's work is set against in `extra_ops`: the step of the same work minus jaxsel's part
COMPARED = {"bsp": "minimal", "bsp_lean": "minimal", "selsync_sync": "bsp", "selsync_local": "local"}


def _entry(text: str) -> str:
    entry = text[text.index("\nENTRY"):]
    return entry[:entry.index("\n}")]


def hlo_counts(text: str) -> dict:
    """Fusions and other work-launching ops in the entry computation of compiled HLO text
    (branches of a conditional are not counted; the conditional is, once)."""
    work = [op for op, _ in _INSTRUCTION.findall(_entry(text)) if op not in _FREE_OPS]
    return {"fusions": sum(op == "fusion" for op in work), "ops": len(work)}


def hlo_ops(text: str) -> collections.Counter:
    """The entry computation's work-launching ops, each labelled by its opcode and the JAX
    operation it came from (metadata op_name, the jit's own name dropped), e.g.
    "fusion vmap()/square"; an op without metadata (a copy XLA inserted) by its opcode."""
    labels = collections.Counter()
    for op, rest in _INSTRUCTION.findall(_entry(text)):
        if op in _FREE_OPS:
            continue
        source = re.search(r'op_name="([^"]*)"', rest)
        where = re.sub(r"^jit\([^)]*\)/", "", source.group(1)) if source else "(inserted by XLA)"
        labels[f"{op} {where}"] += 1
    return labels


def extra_ops(text: str, reference: str) -> dict:
    """Where a variant's ops differ from its reference's, by `hlo_ops` label, most first:
    {"more": what only the variant runs, "fewer": what only the reference runs}. The
    same work can carry another label on each side (the hand-written step's `w - lr * g`
    is a "sub", optax's update an "add"), hence both lists."""
    ours, theirs = hlo_ops(text), hlo_ops(reference)
    order = lambda counter: dict(sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])))
    return {"more": order(ours - theirs), "fewer": order(theirs - ours)}


def _steps_per_s(runner: _Runner, steps: int, read_every: int) -> float:
    """Dispatch `steps` steps, fetching metrics to the host every `read_every` steps.

    The step bounds its own queue as in a real loop (on CPU at most `CPU_MAX_INFLIGHT`
    steps unfinished, core/pacing.py; unbounded on accelerators).
    """
    t0 = time.perf_counter()
    for i in range(steps):
        metrics = runner.step()
        if (i + 1) % read_every == 0:
            jax.device_get(metrics)
    jax.block_until_ready(runner.state)
    return steps / (time.perf_counter() - t0)


def _random_batch(input_shape, num_classes: int, n: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {"image": rng.standard_normal((n, *input_shape), dtype=np.float32),
            "label": rng.integers(0, num_classes, size=(n,), dtype=np.int32)}


_COUNTS = ("batch", "repeats", "warmup", "dispatch_steps", "dispatch_repeats", "log_every")


def resolve_settings(size: str, **given) -> dict:
    """The size's defaults for every count left None, each checked to be an integer >= 1."""
    if size not in SIZES:
        raise ValueError(f"size must be one of {', '.join(SIZES)}, got {size!r}")
    out = {}
    for name in _COUNTS:
        value = SIZES[size][name] if given.get(name) is None else given[name]
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        out[name] = int(value)
    return out


class _Workload:
    """The model, its loss in the asked precision, and the random data of one layout."""

    def __init__(self, model: str, input_shape, num_classes: int, seed: int, dtype: str, batch: int,
                 local_replicas: str = "auto"):
        self.local_replicas = local_replicas
        self.fm = precision.build(model, input_shape, num_classes, seed, dtype)
        self.loss_fn, self.stateful = precision.classification_loss(self.fm, dtype), self.fm.stateful
        self.input_shape, self.num_classes, self.seed, self.batch = input_shape, num_classes, seed, batch
        self.opt = optax.sgd(LR)

    def data(self, layout: Layout):
        return global_batch(_random_batch(self.input_shape, self.num_classes, layout.replicas * self.batch,
                                          self.seed), layout.mesh)

    def jaxsel(self, name: str, strategy, layout: Layout, **step_options) -> _Runner:
        fm, mesh = self.fm, layout.mesh
        state = init_state(fm.params, self.opt, strategy, mesh, fm.model_state if self.stateful else None,
                           replicas=layout.replicas)
        step = make_train_step(self.loss_fn, self.opt, strategy, mesh, stateful=self.stateful,
                               local_replicas=self.local_replicas, **step_options)
        return _Runner(name, step, state, self.data(layout))

    def minimal(self, layout: Layout) -> _Runner:
        n, fm, mesh = layout.replicas, self.fm, layout.mesh
        put = lambda t: jax.device_put(
            jax.tree.map(lambda x: jnp.broadcast_to(x, (n, *jnp.shape(x))), t), NamedSharding(mesh, P(AXIS)))
        state = (put(fm.params), put(fm.model_state if self.stateful else {}))
        return _Runner("minimal", minimal_sgd_step(self.loss_fn, mesh, LR, self.stateful), state,
                       self.data(layout), minimal=True)


def _selsync_local():
    """window=1, delta out of reach: never syncs (the default raw statistic forces W-1 = 0
    steps), so every timed step is a local one."""
    return SelSync(delta=1e9, window=1)


def _plain_local():
    return TriggeredStrategy(trigger=Never(), sync="params")


def _runners(work: _Workload, layout: Layout, packed: Layout | None) -> list[_Runner]:
    runners = [
        work.jaxsel("selsync_local", _selsync_local(), layout),
        work.jaxsel("local", _plain_local(), layout),
        work.jaxsel("selsync_sync", SelSync(delta=0.0), layout),   # every step votes: always syncs
        work.jaxsel("bsp", BSP(), layout),
        work.jaxsel("bsp_lean", BSP(), layout, grad_norm_metric=False),
        work.minimal(layout),
    ]
    if packed is not None:
        runners += [work.jaxsel("selsync_local_packed", _selsync_local(), packed),
                    work.jaxsel("local_packed", _plain_local(), packed)]
    return runners


def _time_interleaved(runners: list[_Runner], warmup: int, repeats: int,
                      say: Callable[[str], None] = lambda text: None) -> dict[str, _Runner]:
    """Warm every variant up (its first step compiles it), then time them round-robin. `say`
    gets a line before each variant's warm-up and before the timing: compiling a variant
    takes minutes on a loaded CPU, and a bench silent for them looks hung."""
    began = time.perf_counter()
    for i, r in enumerate(runners, 1):
        say(f"bench: [variant {i} of {len(runners)} · {_clock(time.perf_counter() - began)} elapsed] "
            f"{_LABELS.get(r.name, r.name)}: compiling, {warmup} warm-up steps")
        r.warm(warmup)
    say(f"bench: timing {repeats} rounds of the {len(runners)} variants, one step each in turn")
    for _ in range(repeats):
        for r in runners:
            r.timed_step()
    by = {r.name: r for r in runners}
    for name in ("selsync_local", "selsync_local_packed"):
        if name in by and any(bool(s) for s in jax.device_get(by[name].synced)):
            raise RuntimeError(f"the SelSync {name!r} variant synchronized during timing; its ratio would be invalid")
    if not all(bool(s) for s in jax.device_get(by["selsync_sync"].synced)):
        raise RuntimeError("the SelSync 'sync' variant skipped a sync during timing; its ratio would be invalid")
    return by


def _clock(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f"{m}:{s:02d}"


def _dispatch_rates(bsp: _Runner, cfg: dict) -> dict:
    lazy, eager = [], []
    for _ in range(cfg["dispatch_repeats"]):
        lazy.append(_steps_per_s(bsp, cfg["dispatch_steps"], cfg["log_every"]))
        eager.append(_steps_per_s(bsp, cfg["dispatch_steps"], 1))
    return {f"read_every_{cfg['log_every']}": statistics.median(lazy), "read_every_1": statistics.median(eager)}


def _ratios(med: dict, sps: dict, log_every: int) -> dict:
    ratios = {
        "selsync_local_over_local": med["selsync_local"] / med["local"],
        "selsync_sync_over_bsp": med["selsync_sync"] / med["bsp"],
        "bsp_over_minimal": med["bsp"] / med["minimal"],
        "async_dispatch": sps[f"read_every_{log_every}"] / sps["read_every_1"],
        "bsp_lean_over_minimal": med["bsp_lean"] / med["minimal"],
    }
    if "local_packed" in med:
        ratios["packed_selsync_local_over_local"] = med["selsync_local_packed"] / med["local_packed"]
    return ratios


def _settings(work: _Workload, model: str, dtype: str, layout: Layout, packed: Layout | None, cfg: dict) -> dict:
    """What a result was measured on and with (the JSON's and the table's header)."""
    device, n = layout.devices[0], layout.replicas
    return {"device_kind": device.device_kind, "platform": device.platform, "replicas": n,
            "layout": layout.describe(),
            "packed_layout": packed.describe() if packed is not None else None,
            "dtype": dtype, "model": model, "params": count_params(work.fm.params),
            "local_replicas": work.local_replicas,
            "input_shape": list(work.input_shape), "num_classes": int(work.num_classes),
            "batch_per_replica": cfg["batch"], "global_batch": cfg["batch"] * n,
            **{k: cfg[k] for k in ("repeats", "warmup", "dispatch_steps", "dispatch_repeats", "log_every")},
            "jax_version": jax.__version__}


def run_bench(
    model: str = "mlp",
    replicas: int | None = None,
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
    seed: int = 0,
    verbose: bool = True,
    devices: int | None = None,
    platform: str | None = None,
    dtype: str = "fp32",
    packed: int = PACKED,
    hlo: bool = False,
    local_replicas: str = "auto",
) -> dict:
    """Measure jaxsel's step overheads; print a table, optionally write JSON, return a dict.

    model: a classification model of `jaxsel.models` ("mlp", "cnn", "resnet18", ...) fed
        random data of `input_shape` (default: the size's; (784,) for the MLP, else images).
    replicas / devices / platform: the layout (`jaxsel.choose_layout(replicas, devices=...,
        platform=...)`: default one replica per device of the default backend, the
        accelerator's when there is one; replicas packed on the devices when there are fewer).
    batch: examples per replica per step (global batch = replicas * batch).
    repeats: timed steps per variant (medians over them); warmup: untimed steps first.
    size: "default" or "tiny" (for tests): the defaults of every None count above.
    dispatch_steps / dispatch_repeats / log_every: the async-dispatch loop's length, how
        often it is repeated, and how often its "lazy" variant reads metrics (100).
    dtype: "fp32" or "bf16" (mixed precision, `jaxsel.analysis.precision`).
    packed: replicas of the packed row (SelSync local / plain local, all on the first
        device); 0 leaves the row out.
    local_replicas: how jaxsel's steps compute a device's replicas (`make_train_step`); "vmap"
        with one replica per device is a GPU's path ("auto" there), on a CPU too.
    verbose: print the table, and on stderr a line before each variant compiles and before
        each timed phase (`--model cnn` on 8 CPU devices compiles for minutes).
    hlo: also count each variant's compiled ops (`hlo_counts`; compiles each step once more)
        and list what each adds over its reference (`extra_ops`, `COMPARED`).

    Returns {"ratios": {...}, "median_step_ms": {...}, "steps_per_s": {...}, ("hlo": {...}),
    and the settings: device_kind, platform, layout, replicas, dtype, model, ...}.
    """
    cfg = resolve_settings(size, batch=batch, repeats=repeats, warmup=warmup, dispatch_steps=dispatch_steps,
                           dispatch_repeats=dispatch_repeats, log_every=log_every)
    precision.check_dtype(dtype)
    if isinstance(packed, bool) or not isinstance(packed, (int, np.integer)) or packed < 0:
        raise ValueError(f"packed must be an integer >= 0 (0 = no packed row), got {packed!r}")
    shape = SIZES[size]["mlp_shape" if model == "mlp" else "image_shape"] if input_shape is None else input_shape
    shape = tuple(int(d) for d in shape)
    layout = choose_layout(replicas, devices=devices, platform=platform)
    packed_layout = choose_layout(int(packed), devices=1, platform=platform) if packed else None
    device = layout.devices[0]
    check_local_replicas(local_replicas)
    work = _Workload(model, shape, num_classes, seed, dtype, cfg["batch"], local_replicas)
    say = (lambda text: print(text, file=sys.stderr, flush=True)) if verbose else (lambda text: None)
    by = _time_interleaved(_runners(work, layout, packed_layout), cfg["warmup"], cfg["repeats"], say)
    say(f"bench: asynchronous dispatch, {cfg['dispatch_repeats']} x {cfg['dispatch_steps']} BSP steps read every "
        f"{cfg['log_every']} and every step")
    sps = _dispatch_rates(by["bsp"], cfg)
    med = {name: r.median_s() for name, r in by.items()}
    result = {"ratios": _ratios(med, sps, cfg["log_every"]), "median_step_ms": {k: v * 1e3 for k, v in med.items()},
              "steps_per_s": sps, **_settings(work, model, dtype, layout, packed_layout, cfg),
              "max_inflight": queue_limit(device.platform) or 0, "size": size}
    if hlo:
        say(f"bench: compiled op counts: compiling the {len(by)} variants once more")
        texts = {name: r.compiled_text() for name, r in by.items()}
        result["hlo"] = {name: hlo_counts(text) for name, text in texts.items()}
        result["hlo_extra"] = {f"{name}-{ref}": extra_ops(texts[name], texts[ref]) for name, ref in COMPARED.items()}
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
    "selsync_local_packed": "packed: SelSync step, stays local",
    "local_packed": "packed: plain local step",
}


def format_table(result: dict) -> str:
    """The human-readable report of a `run_bench` result."""
    hlo = result.get("hlo")
    lines = [
        f"jaxsel bench: model={result['model']} ({result['params']:,} params) dtype={result.get('dtype', 'fp32')} "
        f"replicas={result['replicas']} device={result['device_kind']} ({result['platform']})"
        + (f" local_replicas={result['local_replicas']}" if result.get("local_replicas", "auto") != "auto" else ""),
        f"layout: {result.get('layout', '?')}",
        *([f"packed row layout: {result['packed_layout']}"] if result.get("packed_layout") else []),
        f"batch {result['batch_per_replica']}/replica (global {result['global_batch']}), "
        f"{result['repeats']} timed steps per variant after {result['warmup']} warm-up, medians, interleaved",
        "",
        f"{'variant':38s} {'ms/step':>10s}" + (f" {'fusions':>8s} {'ops':>5s}" if hlo else ""),
    ]
    for key, label in _LABELS.items():
        if key in result["median_step_ms"]:
            counts = f" {hlo[key]['fusions']:8d} {hlo[key]['ops']:5d}" if hlo else ""
            lines.append(f"{label:38s} {result['median_step_ms'][key]:10.3f}{counts}")
    lines += ["", f"{'ratio':38s} {'value':>10s}"]
    for key in RATIOS + PACKED_RATIOS + INFO_RATIOS:
        if key in result["ratios"]:
            lines.append(f"{key:38s} {result['ratios'][key]:10.3f}")
    every = result["log_every"]
    lazy, eager = result["steps_per_s"][f"read_every_{every}"], result["steps_per_s"]["read_every_1"]
    lines.append(f"  (BSP steps/s reading metrics every {every} steps: {lazy:.1f}; every step: {eager:.1f})")
    if hlo:
        lines.append("  (fusions / ops: the entry computation of each compiled step; about one kernel each on a GPU)")
        for pair, diff in result.get("hlo_extra", {}).items():
            more, fewer = diff["more"], diff["fewer"]
            shown = lambda d: ", ".join(f"{n} x {label}" for label, n in list(d.items())[:10]) + \
                (", ..." if len(d) > 10 else "")
            lines.append(f"  {pair}: {sum(more.values()) - sum(fewer.values()):+d} ops; more: {shown(more) or '-'}; "
                         f"fewer: {shown(fewer) or '-'}")
    return "\n".join(lines)


def ratios_ok(result: dict) -> bool:
    """True when every ratio is a positive finite number."""
    return all(math.isfinite(v) and v > 0 for v in result["ratios"].values())


def missed_targets(result: dict) -> list[str]:
    """The targeted ratios above TARGET, as "name=value"."""
    return [f"{k}={result['ratios'][k]:.3f}" for k in TARGETED if result["ratios"].get(k, 0) > TARGET]
