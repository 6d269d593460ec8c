"""Step-time overheads of jaxsel, measured side by side in one process.

Five ratios answer "what does jaxsel's machinery cost?":
  selsync_local_over_local  a SelSync step that stays local / a plain local step that
                            computes the same gradient norm (its `grad_norm` metric): the
                            price of the significance test's windows and its 4-byte vote;
  selsync_sync_over_bsp     a SelSync step that syncs (parameter averaging) / a BSP step;
  bsp_over_minimal          jaxsel's BSP step / the hand-written shard_map + pmean SGD step
                            an expert would write: the price of the framework itself;
  bsp_over_user             `make_train_step(BSP)` / a user's own shard_map loop with
                            `jaxsel.as_optax(BSP)` as its optimizer: the price of jaxsel's
                            driver over its transformation (metrics, state layout, ...);
  async_dispatch            steps/s reading metrics every `log_every` steps / every step:
                            what asynchronous dispatch buys the training loop.
and, with `packed_replicas` (default 8) on one device (the accelerator's, or CPU device 0):
  packed_selsync_local_over_local  the first ratio with the replicas packed on one device.
Three more, without a target, locate the costs:
  bsp_norm_over_bsp         the BSP step with `grad_norm_metric=True` / without: the norm's pass;
  user_over_minimal         the user's loop with `as_optax(BSP)` / the hand-written one;
  user_selsync_over_user    the user's loop with `as_optax(SelSync)` staying local / with
                            `as_optax(BSP)`: SelSync's whole statistic (norm, windows, vote).
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
from ..core.state import init_state, replicate_tree
from ..core.transformation import as_optax
from ..core.step import check_packing, make_train_step, resolve_packing
from ..core.triggers import Never
from ..models import count_params
from ..strategies import BSP, SelSync, TriggeredStrategy
from . import precision

RATIOS = ("selsync_local_over_local", "selsync_sync_over_bsp", "bsp_over_minimal", "bsp_over_user", "async_dispatch")
PACKED_RATIOS = ("packed_selsync_local_over_local",)
INFO_RATIOS = ("bsp_norm_over_bsp", "user_over_minimal", "user_selsync_over_user")
#: ratios `jaxsel bench` holds to TARGET (async_dispatch has none: higher is better)
TARGETED = ("selsync_local_over_local", "selsync_sync_over_bsp", "bsp_over_minimal", "bsp_over_user") + PACKED_RATIOS
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


USER_LOCAL = "local"   # the vmap axis a user's loop names its packed replicas by


def user_optax_step(loss_fn: Callable, tx, mesh, k: int, stateful: bool = False, vmapped: bool = True):
    """A user's own data-parallel loop built on jaxsel: their `shard_map` over the devices,
    their loss and gradients, and `tx = jaxsel.as_optax(method, inner, axis_name=...)` where
    a plain loop has its optimizer. What jaxsel's own step (`make_train_step`) costs beyond
    this is the driver's, not the method's. A device's k replicas run as a named `vmap`
    (axis `USER_LOCAL`); with `vmapped=False` and k = 1, as the plain program on the
    device's one replica (`x[0]`), the way `make_train_step`'s unroll and map loops compute
    it. Returns jitted `step(params, model_state, opt_state, batch) -> (params, model_state,
    opt_state, loss)`, every value per replica (leading axis N)."""
    def replica(params, model_state, opt_state, batch):
        if stateful:
            (loss, model_state), g = jax.value_and_grad(loss_fn, has_aux=True)(params, model_state, batch)
        else:
            loss, g = jax.value_and_grad(loss_fn)(params, batch)
        updates, opt_state = tx.update(g, opt_state, params)
        return optax.apply_updates(params, updates), model_state, opt_state, loss

    def device(params, model_state, opt_state, batch):
        batch = jax.tree.map(lambda x: x.reshape((k, -1) + x.shape[1:]), batch)
        if vmapped:
            return jax.vmap(replica, axis_name=USER_LOCAL)(params, model_state, opt_state, batch)
        one = jax.tree.map(lambda x: x[0], (params, model_state, opt_state, batch))
        return jax.tree.map(lambda x: x[None], replica(*one))

    if not vmapped and k != 1:
        raise ValueError(f"a user's loop runs k = {k} replicas per device as a named vmap (vmapped=True)")
    sharded = jax.shard_map(device, mesh=mesh, in_specs=(P(AXIS),) * 4, out_specs=(P(AXIS),) * 4)
    return jax.jit(sharded, donate_argnums=(0, 1, 2))


class _Runner:
    """One variant: its own state, stepped one (blocked) step at a time."""

    def __init__(self, name: str, step: Callable, state: Any, batch: Any, own_loop: bool = False):
        """`own_loop`: `step(*state, batch) -> (*state, loss)` (a loop written without
        `make_train_step`: the hand-written one, a user's), not `step(state, batch)`."""
        self.name, self._step, self.state, self._batch, self._own = name, step, state, batch, own_loop
        self.times: list[float] = []
        self.synced: list = []

    def step(self):
        if self._own:
            *state, loss = self._step(*self.state, self._batch)
            self.state = tuple(state)
            facts = getattr(state[-1], "facts", None)   # a user's loop: as_optax's state says what synced
            return {"loss": loss} if facts is None else {"loss": loss, "synced": facts.synced}
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
        args = (*self.state, self._batch) if self._own else (self.state, self._batch)
        return self._step.lower(*args).compile().as_text()


#: entry-computation instructions that launch no work of their own
_FREE_OPS = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "opt-barrier"}
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?[\w.\-]+ = [^=]*?\s([a-z][a-z\-]*)\((.*)$", re.M)
#: what a variant's work is set against in `extra_ops` (variant, reference): the step of the
#: same work minus the part whose price the pair shows
COMPARED = (("bsp", "user_bsp"), ("user_bsp", "minimal"), ("bsp", "minimal"), ("bsp_norm", "bsp"),
            ("selsync_sync", "bsp"), ("selsync_local", "local"), ("user_selsync", "user_bsp"))


def _entry(text: str) -> str:
    """The entry computation, its tuple types' `/*index=N*/` comments dropped (their `=`
    would hide an instruction with a long tuple type, a combined all-reduce, from the count)."""
    entry = text[text.index("\nENTRY"):]
    return re.sub(r"/\*index=\d+\*/", "", entry[:entry.index("\n}")])


def hlo_counts(text: str) -> dict:
    """Fusions and other work-launching ops in the entry computation of compiled HLO text
    (branches of a conditional are not counted; the conditional is, once)."""
    work = [op for op, _ in _INSTRUCTION.findall(_entry(text)) if op not in _FREE_OPS]
    return {"fusions": sum(op == "fusion" for op in work), "ops": len(work)}


_DEFINITION = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = (\w+\[[\d,]*\])")
_REDUCTION = re.compile(r"\s(?:reduce|reduce-window)\((?:(\w+\[[\d,]*\])\S* )?%?([\w.\-]+)")


def _elements(shape: str) -> int:
    return math.prod(int(d) for d in shape[shape.index("[") + 1:-1].split(",") if d)


def gradient_reductions(text: str, sizes) -> int:
    """How many reductions (`reduce`, `reduce-window`, in any computation of compiled HLO
    text) read a tensor with as many elements as one of `sizes`, a model's parameter (so
    gradient) tensors: how often a step reads its gradients whole in a reduction, e.g.
    SelSync's norm. Unlike an op count this holds across XLA releases: XLA may lay a
    tensor out anew, reshape it or split its reduction in two stages, but the first stage
    still reads all of it. A step with no gradient statistic (BSP) has none: its backward
    pass reduces activations, whose sizes the caller checks this way."""
    sizes, shapes, count = set(sizes), {}, 0
    for line in text.splitlines():
        if line and not line[0].isspace():
            shapes = {}   # a new computation: names are its own
        definition = _DEFINITION.match(line)
        if definition:
            shapes[definition.group(1)] = definition.group(2)
        reduction = _REDUCTION.search(line)
        if reduction:
            shape = reduction.group(1) or shapes.get(reduction.group(2))
            count += shape is not None and _elements(shape) in sizes
    return count


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
                 packing: str = "auto"):
        self.packing = packing
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
                               packing=self.packing, **step_options)
        return _Runner(name, step, state, self.data(layout))

    def minimal(self, layout: Layout) -> _Runner:
        n, fm, mesh = layout.replicas, self.fm, layout.mesh
        put = lambda t: jax.device_put(
            jax.tree.map(lambda x: jnp.broadcast_to(x, (n, *jnp.shape(x))), t), NamedSharding(mesh, P(AXIS)))
        state = (put(fm.params), put(fm.model_state if self.stateful else {}))
        return _Runner("minimal", minimal_sgd_step(self.loss_fn, mesh, LR, self.stateful), state,
                       self.data(layout), own_loop=True)

    def user_loop(self, name: str, strategy, layout: Layout) -> _Runner:
        """A user's loop with `jaxsel.as_optax(strategy)` (`user_optax_step`) on `layout`,
        computing a device's replicas the way this workload's `make_train_step` does (a
        vmap, or for one replica per device with the unroll or map loop, the plain program)."""
        k, fm = layout.per_device, self.fm
        vmapped = k > 1 or resolve_packing(self.packing, layout.mesh, k) == "vmap"
        tx = as_optax(strategy, self.opt, axis_name=(USER_LOCAL, AXIS) if vmapped else AXIS)
        state = replicate_tree((fm.params, fm.model_state if self.stateful else {}, tx.init(fm.params)),
                               layout.replicas)
        state = jax.device_put(state, NamedSharding(layout.mesh, P(AXIS)))
        return _Runner(name, user_optax_step(self.loss_fn, tx, layout.mesh, k, self.stateful, vmapped), state,
                       self.data(layout), own_loop=True)


def _selsync_local():
    """window=1, delta out of reach: never syncs (the default raw statistic forces W-1 = 0
    steps), so every timed step is a local one."""
    return SelSync(delta=1e9, window=1)


def _plain_local():
    return TriggeredStrategy(trigger=Never(), sync="params")


#: the variants, in the order they run; the packed row's two run only with a packed layout
VARIANTS = ("selsync_local", "local", "selsync_sync", "bsp", "bsp_norm", "user_bsp", "user_selsync", "minimal")
PACKED_VARIANTS = ("selsync_local_packed", "local_packed")


def _build(work: _Workload, name: str, layout: Layout, packed: Layout | None) -> _Runner:
    """One variant. The plain local steps compute SelSync's gradient norm too (as their
    metric), so that SelSync's local step over them is the price of its windows and vote;
    the norm's own price is `bsp_norm` over `bsp`."""
    local = dict(grad_norm_metric=True)
    return {
        "selsync_local": lambda: work.jaxsel(name, _selsync_local(), layout),
        "local": lambda: work.jaxsel(name, _plain_local(), layout, **local),
        "selsync_sync": lambda: work.jaxsel(name, SelSync(delta=0.0), layout),   # every step votes: always syncs
        "bsp": lambda: work.jaxsel(name, BSP(), layout),
        "bsp_norm": lambda: work.jaxsel(name, BSP(), layout, **local),
        "user_bsp": lambda: work.user_loop(name, BSP(), layout),
        "user_selsync": lambda: work.user_loop(name, _selsync_local(), layout),
        "minimal": lambda: work.minimal(layout),
        "selsync_local_packed": lambda: work.jaxsel(name, _selsync_local(), packed),
        "local_packed": lambda: work.jaxsel(name, _plain_local(), packed, **local),
    }[name]()


def _runners(work: _Workload, layout: Layout, packed: Layout | None, names: Sequence[str]) -> list[_Runner]:
    return [_build(work, name, layout, packed) for name in names if packed is not None or name not in PACKED_VARIANTS]


def check_variants(variants: Sequence[str] | None) -> tuple[str, ...]:
    """`variants` (None: all of them) as a tuple of known names; ValueError naming the unknown."""
    if variants is None:
        return VARIANTS + PACKED_VARIANTS
    names = tuple(variants)
    bad = [v for v in names if v not in VARIANTS + PACKED_VARIANTS]
    if bad or not names:
        raise ValueError(f"variants must be among {', '.join(VARIANTS + PACKED_VARIANTS)}, got {', '.join(bad) or 'none'}")
    return names


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
    for name in ("selsync_local", "selsync_local_packed", "user_selsync"):
        if name in by and any(np.any(s) for s in jax.device_get(by[name].synced)):
            raise RuntimeError(f"the SelSync {name!r} variant synchronized during timing; its ratio would be invalid")
    if "selsync_sync" in by and not all(np.all(s) for s in jax.device_get(by["selsync_sync"].synced)):
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


#: each step-time ratio: (numerator, denominator) variants
_PAIRS = {"selsync_local_over_local": ("selsync_local", "local"), "selsync_sync_over_bsp": ("selsync_sync", "bsp"),
          "bsp_over_minimal": ("bsp", "minimal"), "bsp_over_user": ("bsp", "user_bsp"),
          "bsp_norm_over_bsp": ("bsp_norm", "bsp"), "user_over_minimal": ("user_bsp", "minimal"),
          "user_selsync_over_user": ("user_selsync", "user_bsp"),
          "packed_selsync_local_over_local": ("selsync_local_packed", "local_packed")}


def _ratios(med: dict, sps: dict, log_every: int) -> dict:
    """Every ratio whose variants ran (all of them unless `variants` chose)."""
    ratios = {key: med[a] / med[b] for key, (a, b) in _PAIRS.items() if a in med and b in med}
    if sps:
        ratios["async_dispatch"] = sps[f"read_every_{log_every}"] / sps["read_every_1"]
    return ratios


def _settings(work: _Workload, model: str, dtype: str, layout: Layout, packed: Layout | None, cfg: dict) -> dict:
    """What a result was measured on and with (the JSON's and the table's header)."""
    device, n = layout.devices[0], layout.replicas
    return {"device_kind": device.device_kind, "platform": device.platform, "replicas": n,
            "layout": layout.describe(),
            "packed_layout": packed.describe() if packed is not None else None,
            "dtype": dtype, "model": model, "params": count_params(work.fm.params),
            "packing": work.packing,
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
    packed_replicas: int = PACKED,
    hlo: bool = False,
    packing: str = "auto",
    variants: Sequence[str] | None = None,
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
    packed_replicas: replicas of the packed row (SelSync local / plain local, all on the first
        device); 0 leaves the row out.
    packing: how jaxsel's steps loop over a device's replicas (`make_train_step`); "vmap"
        with one replica per device is a GPU's path ("auto" there), on a CPU too.
    verbose: print the table, and on stderr a line before each variant compiles and before
        each timed phase (`--model cnn` on 8 CPU devices compiles for minutes).
    hlo: also count each variant's compiled ops (`hlo_counts`; compiles each step once more)
        and list what each adds over its reference (`extra_ops`, `COMPARED`).
    variants: the variants to run (`VARIANTS`, `PACKED_VARIANTS`; default all): fewer
        compiles where a session has little time; each ratio needs both of its variants
        (async_dispatch needs "bsp").

    Returns {"ratios": {...}, "median_step_ms": {...}, "steps_per_s": {...}, ("hlo": {...}),
    and the settings: device_kind, platform, layout, replicas, dtype, model, ...}.
    """
    cfg = resolve_settings(size, batch=batch, repeats=repeats, warmup=warmup, dispatch_steps=dispatch_steps,
                           dispatch_repeats=dispatch_repeats, log_every=log_every)
    work, layout, packed_layout, names = _setup(model, size, input_shape, num_classes, seed, dtype, cfg["batch"],
                                                packing, replicas, devices, platform, packed_replicas, variants)
    device = layout.devices[0]
    say = (lambda text: print(text, file=sys.stderr, flush=True)) if verbose else (lambda text: None)
    by = _time_interleaved(_runners(work, layout, packed_layout, names), cfg["warmup"], cfg["repeats"], say)
    if "bsp" in by:
        say(f"bench: asynchronous dispatch, {cfg['dispatch_repeats']} x {cfg['dispatch_steps']} BSP steps read "
            f"every {cfg['log_every']} and every step")
    sps = _dispatch_rates(by["bsp"], cfg) if "bsp" in by else {}
    med = {name: r.median_s() for name, r in by.items()}
    result = {"ratios": _ratios(med, sps, cfg["log_every"]), "median_step_ms": {k: v * 1e3 for k, v in med.items()},
              "steps_per_s": sps, **_settings(work, model, dtype, layout, packed_layout, cfg),
              "max_inflight": queue_limit(device.platform) or 0, "size": size}
    if hlo:
        say(f"bench: compiled op counts: compiling the {len(by)} variants once more")
        result.update(_hlo_result({name: r.compiled_text() for name, r in by.items()}))
    if verbose:
        print(format_table(result))
    if out_json:
        with open(out_json, "w") as f:
            json.dump(result, f, indent=2)
    return result


def _setup(model, size, input_shape, num_classes, seed, dtype, batch, packing, replicas, devices, platform,
           packed, variants):
    """(workload, layout, packed layout or None, variant names), every argument checked."""
    precision.check_dtype(dtype)
    packing = check_packing(packing)
    if isinstance(packed, bool) or not isinstance(packed, (int, np.integer)) or packed < 0:
        raise ValueError(f"packed_replicas must be an integer >= 0 (0 = no packed row), got {packed!r}")
    names = check_variants(variants)
    shape = SIZES[size]["mlp_shape" if model == "mlp" else "image_shape"] if input_shape is None else input_shape
    shape = tuple(int(d) for d in shape)
    layout = choose_layout(replicas, devices=devices, platform=platform)
    packed_layout = choose_layout(int(packed), devices=1, platform=platform) if packed else None
    return _Workload(model, shape, num_classes, seed, dtype, batch, packing), layout, packed_layout, names


def _hlo_result(texts: dict[str, str]) -> dict:
    """`hlo` (each variant's counts) and `hlo_extra` (each compared pair's extra ops)."""
    return {"hlo": {name: hlo_counts(text) for name, text in texts.items()},
            "hlo_extra": {f"{name}-{ref}": extra_ops(texts[name], texts[ref]) for name, ref in COMPARED
                          if name in texts and ref in texts}}


def compiled_programs(model: str = "cnn", variants: Sequence[str] | None = None, *, size: str = "default",
                      replicas: int | None = None, devices: int | None = None, platform: str | None = None,
                      dtype: str = "fp32", packing: str = "auto", packed_replicas: int = 0, batch: int | None = None,
                      input_shape: Sequence[int] | None = None, num_classes: int = 10, seed: int = 0) -> dict:
    """Each variant's compiled program (optimized HLO text), built as `run_bench` builds it
    and never run: the op counts (`hlo_counts`, `extra_ops`; `jaxsel bench --hlo-only`)
    without the timing, which on a loaded CPU takes far longer than the compiles."""
    cfg = resolve_settings(size, batch=batch)
    work, layout, packed_layout, names = _setup(model, size, input_shape, num_classes, seed, dtype, cfg["batch"],
                                                packing, replicas, devices, platform, packed_replicas, variants)
    return {r.name: r.compiled_text() for r in _runners(work, layout, packed_layout, names)}


def hlo_report(model: str = "cnn", variants: Sequence[str] | None = None, **options) -> str:
    """`compiled_programs`' counts and each compared pair's extra ops, as `format_table` prints them."""
    result = _hlo_result(compiled_programs(model, variants, **options))
    lines = [f"jaxsel bench --hlo-only: model={model} jax={jax.__version__} "
             + " ".join(f"{k}={v}" for k, v in options.items() if v is not None), "",
             f"{'variant':38s} {'fusions':>8s} {'ops':>5s}"]
    lines += [f"{_LABELS[k]:38s} {c['fusions']:8d} {c['ops']:5d}" for k, c in result["hlo"].items()]
    return "\n".join(lines + _hlo_lines(result["hlo_extra"]))


_LABELS = {
    "selsync_local": "SelSync step, stays local",
    "local": "plain local step (+ grad_norm)",
    "selsync_sync": "SelSync step, syncs (param avg)",
    "bsp": "BSP step (grad mean)",
    "bsp_norm": "BSP step + grad_norm metric",
    "user_bsp": "user shard_map loop, as_optax(BSP)",
    "user_selsync": "user loop, as_optax(SelSync) local",
    "minimal": "hand-written shard_map + pmean SGD",
    "selsync_local_packed": "packed: SelSync step, stays local",
    "local_packed": "packed: plain local (+ grad_norm)",
}


def format_table(result: dict) -> str:
    """The human-readable report of a `run_bench` result."""
    hlo = result.get("hlo")
    lines = [
        f"jaxsel bench: model={result['model']} ({result['params']:,} params) dtype={result.get('dtype', 'fp32')} "
        f"replicas={result['replicas']} device={result['device_kind']} ({result['platform']})"
        + (f" packing={result['packing']}" if result.get("packing", "auto") != "auto" else ""),
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
    every, sps = result["log_every"], result["steps_per_s"]
    if sps:
        lines.append(f"  (BSP steps/s reading metrics every {every} steps: {sps[f'read_every_{every}']:.1f}; every step: "
                     f"{sps['read_every_1']:.1f})")
    if hlo:
        lines += _hlo_lines(result.get("hlo_extra", {}))
    return "\n".join(lines)


def _hlo_lines(extra: dict) -> list[str]:
    """Each compared pair's op difference and the ops on either side."""
    shown = lambda d: ", ".join(f"{n} x {label}" for label, n in list(d.items())[:10]) + (", ..." if len(d) > 10 else "")
    lines = ["  (fusions / ops: the entry computation of each compiled step; about one kernel each on a GPU)"]
    for pair, diff in extra.items():
        more, fewer = diff["more"], diff["fewer"]
        lines.append(f"  {pair}: {sum(more.values()) - sum(fewer.values()):+d} ops; more: {shown(more) or '-'}; "
                     f"fewer: {shown(fewer) or '-'}")
    return lines


def ratios_ok(result: dict) -> bool:
    """True when every ratio is a positive finite number."""
    return all(math.isfinite(v) and v > 0 for v in result["ratios"].values())


def missed_targets(result: dict) -> list[str]:
    """The targeted ratios above TARGET, as "name=value"."""
    return [f"{k}={result['ratios'][k]:.3f}" for k in TARGETED if result["ratios"].get(k, 0) > TARGET]
