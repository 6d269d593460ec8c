"""make_train_step: the shard_map'd training step, one driver of the methods' step.

Per replica: loss and gradients on its own slice of the batch -> the method's step
(`transformation.replica_step`, which `jaxsel.as_optax` runs in a user's own loop), which
decides on the device and synchronizes through the sync core (`sync.sync_where`). Nothing
leaves the device: the decision, the trigger's windows and every counter stay there.

Layout: a `shard_map` over the devices (axis "data"); each device's k = N/M packed
replicas' gradients are computed by the step's loop (`packing`; "auto" measures the
candidates once per key, `core/packing.py`), and the method's step runs as a `vmap` over
its block (always, k = 1 included, so there is one code path). Collectives combine both
levels in `jaxsel.collectives`; the sync decision is reduced over every replica before
`lax.cond`, so it is not batched and the cond stays a real conditional.
"""
from __future__ import annotations

import functools
import warnings
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from . import packing
from .cell_options import bind
from .collectives import LOCAL, replica_mean
from .pacing import pace
from .parallel import AXIS, Layout, LayoutError, mesh_layout, resolve_layout
from .state import TrainState, check_state, check_strategy, check_strategy_state, num_replicas
from .sync import StepContext, StepStats, Strategy
from .transformation import grad_norm_sum, norm_sum, replica_step, tensor_square_sums
from .choices import PACKING_LOOPS, current_packing, renamed_packing_note  # the loops by name: core/choices.py


def resolve_packing(loop: str, mesh, per_device: int = 2) -> str:
    """The loop packing `loop` runs without measuring: a forced one as given; "auto"'s
    static default, `packing.STATIC` (unroll) for k > 1 packed replicas, and for one
    replica per device (nothing to choose) the formulation without copies: the plain
    program on CPU (the bit-reproducible reference), vmap's on accelerators (computing on
    the state's [1, ...] blocks directly, it adds no copy of each BatchNorm statistic)."""
    if loop != "auto":
        return loop
    if per_device > 1:
        return packing.STATIC
    return "unroll" if mesh.devices.flat[0].platform == "cpu" else "vmap"


def _over_packed_replicas(fn: Callable, loop: str, args: tuple):
    """`fn` on each of a device's k replicas (leading axis of every leaf of `args`); the
    results stacked on a leading axis."""
    if loop == "vmap":
        return jax.vmap(fn)(*args)
    if loop == "map":
        return lax.map(lambda a: fn(*a), args)
    k = jax.tree.leaves(args)[0].shape[0]
    outs = [fn(*jax.tree.map(lambda x: x[i], args)) for i in range(k)]
    return jax.tree.map(lambda *xs: jnp.stack(xs), *outs)


def _state_specs():
    rep = P(AXIS)
    return TrainState(step=P(), params=rep, opt_state=rep, model_state=rep, strategy_state=rep)


def _replica_axes(step_axis) -> TrainState:
    """vmap axes of a device's block of the state: 0 for every replica-axis field,
    `step_axis` for the step counter (None: one counter shared by the local replicas)."""
    return TrainState(step=step_axis, params=0, opt_state=0, model_state=0, strategy_state=0)


def _as_loss_and_aux(out, stateful: bool):
    """Normalise the loss function's return to (loss, new_model_state_or_None, aux)."""
    if stateful:
        loss, rest = out
        new_ms, aux = rest if isinstance(rest, tuple) else (rest, {})
        return loss, new_ms, aux
    if isinstance(out, tuple):
        return out[0], None, out[1]
    return out, None, {}


def replica_keys(rng, step, replicas) -> jax.Array:
    """The loss's keys at `step` for the global replica indices `replicas`:
    fold_in(fold_in(rng, step), replica), one per replica."""
    at_step = jax.random.fold_in(rng, step)
    return jax.vmap(lambda r: jax.random.fold_in(at_step, r))(replicas)


def _check_arguments(loss_fn, optimizer, strategy, mesh) -> None:
    """TypeError naming a misplaced argument of `make_train_step` (before anything traces)."""
    where = "make_train_step(loss_fn, optimizer, strategy, mesh)"
    if not callable(loss_fn):
        raise TypeError(f"{where}: loss_fn must be a function of (params, batch), got {type(loss_fn).__name__}")
    if not (callable(getattr(optimizer, "init", None)) and callable(getattr(optimizer, "update", None))):
        raise TypeError(f"{where}: optimizer must be an optax GradientTransformation (e.g. optax.sgd(0.1)), got "
                        f"{type(optimizer).__name__}")
    check_strategy(strategy, where)
    if not isinstance(mesh, Mesh) or AXIS not in mesh.shape:
        raise TypeError(f"{where}: mesh must be a jax.sharding.Mesh with axis {AXIS!r} (jaxsel.data_mesh(...)), got "
                        f"{type(mesh).__name__}")


def _check_key(rng) -> None:
    """TypeError unless `rng` is None or a JAX key (typed, or a raw uint32[2])."""
    dtype, shape = getattr(rng, "dtype", None), getattr(rng, "shape", None)
    if rng is None or (dtype is not None and (jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)
                                              or (dtype == np.uint32 and tuple(shape) == (2,)))):
        return
    raise TypeError(f"make_train_step(..., rng=) takes a key, e.g. jax.random.key(0), got {type(rng).__name__} "
                    f"{rng!r}"[:200])


def _per_device(n: int, mesh) -> int:
    """k = N / M; a LayoutError (at trace time) unless the state's N replicas split over
    the mesh's M devices."""
    m = int(mesh.shape[AXIS])
    if n % m:
        raise LayoutError(f"the state holds {n} replicas, which do not split over the mesh's {m} devices: build "
                          f"it with init_state(..., mesh, replicas=N) for N a multiple of {m}")
    return n // m


def _check_batch(batch, n: int) -> None:
    """ValueError unless every leaf of `batch` splits evenly over the `n` replicas (before JAX
    places it: its IndivisibleError names a sharding, not the batch)."""
    for x in jax.tree.leaves(batch):
        shape = np.shape(x)
        if not shape or shape[0] % n:
            paths = [jax.tree_util.keystr(p) for p, y in jax.tree_util.tree_leaves_with_path(batch) if y is x]
            raise ValueError(f"the train step's batch{paths[0] if paths else ''} has shape {tuple(shape)}: its "
                             f"leading dimension must be a multiple of the {n} replicas (replicas x per-replica "
                             f"batch)")


class TrainStep:
    """The jitted step, its batch checked before JAX places it (`lower` too) against the
    replica count the state's leading axis holds; everything else is the jitted function's.
    On CPU each call also paces the caller's loop (`pacing.pace` on the step's loss: a
    plain Python loop cannot queue steps until XLA aborts); on accelerators it never waits.
    The training loop runs the compiled step: no check per step, its own pacing."""

    def __init__(self, jitted, mesh, replicas: int | None = None, traced: Callable | None = None):
        self.jitted, self.mesh, self.replicas = jitted, mesh, replicas
        self.paced = mesh.devices.flat[0].platform == "cpu"
        # loop -> the step's function unjitted, `(state, batch, values)`: a cell batch traces it inside its
        # own program, with each cell's option values (training/cell_batch.py, core/cell_options.py)
        self.traced = traced

    def __call__(self, state, batch):
        self._check(state, batch)
        new_state, metrics = self.jitted(state, batch)
        if self.paced:
            pace(metrics["loss"])   # not the state: the next step donates it
        return new_state, metrics

    def lower(self, state, batch, *args, **kwargs):
        self._check(state, batch)
        return self.jitted.lower(state, batch, *args, **kwargs)

    def _check(self, state, batch) -> None:
        check_state(state, "the train step")
        n = num_replicas(state)
        if self.replicas is not None and n != self.replicas:
            raise LayoutError(f"the train step was built for {self.replicas} replicas, the state holds {n}: build "
                              f"the state with init_state(..., replicas={self.replicas})")
        _per_device(n, self.mesh)
        _same_devices(state, self.mesh)
        _check_batch(batch, n)

    def __getattr__(self, name: str):
        if name in ("jitted", "mesh", "paced", "replicas", "traced"):   # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.jitted, name)


def _same_devices(state, mesh: Mesh) -> None:
    """LayoutError when the state's arrays live on other devices than the step's mesh (a
    state built on the 8-device mesh, a step on 4): JAX's sharding mismatch named neither."""
    leaf = next(iter(jax.tree.leaves(state.params)), None)
    try:
        sharding = leaf.sharding
    except AttributeError:   # host arrays, or traced (the step inside another jit): no placement to check
        return
    if not isinstance(sharding, NamedSharding):
        return   # placed by the user some other way: jit places or refuses them
    held, wanted = set(sharding.device_set), set(mesh.devices.flat)
    if held != wanted:
        raise LayoutError(f"the state lives on {len(held)} device(s) (its mesh {dict(sharding.mesh.shape)}), the "
                          f"train step runs on {len(wanted)} ({dict(mesh.shape)}): build the state with "
                          f"init_state(..., mesh) on the step's mesh, or build the step on the state's")


def make_train_step(
    loss_fn: Callable,
    optimizer,
    strategy: Strategy,
    mesh,
    *,
    stateful: bool = False,
    donate: bool = True,
    grad_norm_metric: bool = False,
    packing: str = "auto",
    rng: jax.Array | None = None,
    replicas: int | None = None,
    local_replicas: str | None = None,
) -> Callable[[TrainState, Any], tuple[TrainState, dict]]:
    """Build the jitted step `step(state, batch) -> (state, metrics)`.

    `loss_fn(params, batch)` returns the mean loss, or `(loss, aux)`. With
    `stateful=True` (models with BatchNorm) it is `loss_fn(params, model_state, batch)`
    returning `(loss, new_model_state)` or `(loss, (new_model_state, aux))`.
    With `rng` (a `jax.random.key`; dropout, noise) the loss takes a last argument `key`,
    `fold_in(fold_in(rng, step), replica)` for the state's step and the replica's global
    index: fresh per replica and step, the same however the replicas are laid out, drawn
    again by a resumed run (in `jaxsel.as_optax`: `lax.axis_index("data")` for the replica).
    `batch` is a pytree of global arrays whose leading dim is replicas * b.
    `mesh` is the devices' mesh (axis "data"); N is the state's leading axis, so one step
    serves any N the devices divide. A `Layout` (`jaxsel.choose_layout(N)`) in the mesh's
    place also checks each state holds its N; `replicas=N` (last release's) does the same
    with a DeprecationWarning naming the replacement.

    metrics: `loss` (mean over replicas), `synced`, `bytes_allreduced` (per replica,
    this step, votes included), `vote_bytes`, per-replica `replica_loss` and any trigger
    statistics (SelSync: `delta`, `vote`) as arrays of length `replicas`.

    `grad_norm_metric=True` adds per-replica `grad_norm` (`grad_norm_sum`: the sum over
    tensors of each tensor's L2 norm, SelSync's statistic s_t). It is off by default: it
    costs a reduction per parameter tensor on every step that nothing else may read
    (BENCHMARKS.md, issue 45's op counts). The training loop asks for it (its non-finite
    check reads it); SelSync's trigger reads the same norm, so there it costs only its output.

    `packing`: how a device loops over its k packed replicas' gradients: "vmap" (one
    batched computation), "unroll" (the plain computation k times in one program), "map"
    (`lax.map`) or "auto": on accelerators the fastest of those, measured on
    first use of its key and cached on disk (`core/packing.py`; `step.decide`, `step.choice`);
    unroll where nothing is measured (on CPU, unless `step.decide(..., measure=True)`).
    Unroll and map reproduce one replica per device bit for bit on CPU; vmap to float32
    rounding. The strategy always runs as a vmap. (Read for one release, warned: "matmul"
    as "auto", `choices.REMOVED_LOOPS`; `local_replicas=`, packing's old name.)
    """
    mesh, replicas = _said_replicas(mesh, replicas)
    _check_arguments(loss_fn, optimizer, strategy, mesh)
    _check_key(rng)
    packing = check_packing(_said_packing(packing, local_replicas))

    def replica_grads(params, model_state, batch, *key):
        """One replica's (loss, new model state or None, aux, gradients, each gradient
        tensor's sum of squares: the norm's pass, finished in `replica_update`); `key`: its
        step's key where the loss takes one."""
        fn = (lambda p: loss_fn(p, model_state, batch, *key)) if stateful else (lambda p: loss_fn(p, batch, *key))
        (loss, (new_ms, aux)), grads = jax.value_and_grad(
            lambda p: (lambda o: (o[0], o[1:]))(_as_loss_and_aux(fn(p), stateful)), has_aux=True
        )(params)
        return loss, new_ms, aux, grads, tensor_square_sums(grads)

    def replica_update(n: int, values: dict, rs: TrainState, computed, weight, replica):
        """One replica (unbatched) of `n`: the method's step, its cell `values` bound, and the metrics."""
        loss, new_ms, aux, grads, square_sums = computed
        gnorm = norm_sum(square_sums)   # computed only where read: the strategy, or the metric
        if new_ms is not None:
            rs = rs.replace(model_state=new_ms)
        ctx = StepContext(axis=AXIS, n=n, step=rs.step, optimizer=optimizer, weight=weight, replica=replica)
        new_state, facts = replica_step(bind(strategy, values), rs, grads, StepStats(rs.step, loss, gnorm, grads), ctx)
        shared = {"loss": replica_mean(loss, AXIS), **facts.metrics()}
        per_replica = {"replica_loss": loss, **({"grad_norm": gnorm} if grad_norm_metric else {}),
                       **facts.replica, **aux}
        return new_state, shared, per_replica

    def device_step(loop: str, n: int, k: int, state: TrainState, batch, values: dict):
        """A device's block: gradients of its k of the `n` replicas (`loop`), then the
        method's step as a vmap (axis LOCAL) over the leading axis."""
        batch = jax.tree.map(lambda x: x.reshape((k, x.shape[0] // k) + x.shape[1:]), batch)
        weight = jnp.float32(jax.tree.leaves(batch)[0].shape[1])
        replica = lax.axis_index(AXIS) * k + jnp.arange(k, dtype=jnp.int32)
        keys = () if rng is None else (replica_keys(rng, state.step, replica),)
        computed = _over_packed_replicas(replica_grads, loop, (state.params, state.model_state, batch, *keys))
        return jax.vmap(functools.partial(replica_update, n, values), in_axes=(_replica_axes(None), 0, None, 0),
                        out_axes=(_replica_axes(None), None, 0), axis_name=LOCAL, axis_size=k)(
            state, computed, weight, replica)

    def step(loop: str, state, batch, values: dict | None = None):
        check_state(state, "the train step")   # at trace time: once per compile
        check_strategy_state(state, strategy, "the train step", optimizer)
        n = num_replicas(state)   # the state's leading axis says N; the mesh says M
        k = _per_device(n, mesh)
        sharded = jax.shard_map(functools.partial(device_step, resolve_packing(loop, mesh, k), n, k), mesh=mesh,
                                in_specs=(_state_specs(), P(AXIS), P()), out_specs=(_state_specs(), P(), P(AXIS)))
        batch = jax.tree.map(lambda x: jax.reshard(x, NamedSharding(mesh, P(AXIS))), batch)
        new_state, shared, per_replica = sharded(state, batch, values or {})
        return new_state, {**shared, **per_replica}

    return _jitted_step(step, functools.partial(_program_digest, replica_grads, rng), mesh, donate, packing, replicas)


def _said_replicas(mesh, replicas: int | None) -> tuple[Any, int | None]:
    """(the mesh, the replica count the step was told, None if none): a Layout carries N;
    `replicas=` is last release's argument, kept for one release with a DeprecationWarning
    that names the replacement (the state's leading axis says N)."""
    if replicas is not None:
        warnings.warn("make_train_step(replicas=N) is deprecated and will be removed in the next release: the "
                      "state's leading axis carries N; say it once, to init_state(..., replicas=N) or "
                      "data_mesh(replicas=N), or pass jaxsel.choose_layout(N) as the mesh",
                      DeprecationWarning, stacklevel=3)
    if isinstance(mesh, Layout):
        return mesh.mesh, resolve_layout(mesh, replicas, "make_train_step").replicas
    if replicas is not None and isinstance(mesh, Mesh) and AXIS in mesh.shape:
        mesh_layout(mesh, replicas)   # a LayoutError in one line unless N splits over the devices
    return mesh, replicas


def _said_packing(packing: str, local_replicas: str | None) -> str:
    """`packing`, or last release's `local_replicas=` for it with a DeprecationWarning (both
    given: a TypeError naming both)."""
    if local_replicas is None:
        return packing
    if packing != "auto":
        raise TypeError(f"make_train_step: local_replicas={local_replicas!r} and packing={packing!r} both set "
                        f"packing (local_replicas is its old name); give it once, as packing")
    warnings.warn(renamed_packing_note(local_replicas), DeprecationWarning, stacklevel=3)
    return local_replicas


def check_packing(packing: str) -> str:
    """The loop `packing` names, one of `PACKING_LOOPS` (a removed one: its replacement,
    warned: `choices.current_packing`); a ValueError naming it otherwise."""
    loop = current_packing(packing, stacklevel=3)   # names the caller of make_train_step
    if loop not in PACKING_LOOPS:
        raise ValueError(f"packing must be one of {', '.join(PACKING_LOOPS)}, got {packing!r}")
    return loop


def _jitted_step(step: Callable, program_of: Callable, mesh, donate: bool, packing_loop: str,
                 replicas: int | None = None) -> TrainStep:
    """`step(loop, state, batch)` jitted for a forced loop, or for "auto" the step that
    dispatches on the loop `core/packing.py` chooses (`program_of(state, batch)`: the
    digest its measurement is keyed by)."""
    state_shardings = jax.tree.map(lambda spec: NamedSharding(mesh, spec), _state_specs())

    def build(loop: str):
        return jax.jit(functools.partial(step, loop), in_shardings=(state_shardings, NamedSharding(mesh, P(AXIS))),
                       donate_argnums=(0,) if donate else ())

    traced = lambda loop: functools.partial(step, loop if packing_loop == "auto" else packing_loop)   # noqa: E731
    if packing_loop != "auto":
        return TrainStep(build(packing_loop), mesh, replicas, traced)
    return TrainStep(packing.AutoLoop(build, program_of, mesh, single_loop=resolve_packing("auto", mesh, 1),
                                      per_device=lambda state: _per_device(num_replicas(state), mesh)), mesh, replicas,
                     traced)


def _program_digest(replica_grads: Callable, rng, state, batch) -> str:
    """The digest of one replica's gradient program (what the packing choice depends on)."""
    n = num_replicas(state)
    one = lambda x: jax.ShapeDtypeStruct(np.shape(x)[1:], x.dtype)
    shard = lambda x: jax.ShapeDtypeStruct((np.shape(x)[0] // n,) + np.shape(x)[1:], x.dtype)
    keys = () if rng is None else (jax.eval_shape(lambda r: jax.random.fold_in(r, 0), rng),)
    args = (jax.tree.map(one, state.params), jax.tree.map(one, state.model_state), jax.tree.map(shard, batch))
    return packing.program_digest(jax.jit(replica_grads).lower(*args, *keys).as_text())
