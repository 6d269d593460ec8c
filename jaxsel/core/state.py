"""TrainState: every replica-divergent leaf carries a leading replica axis.

The replica axis (length N) is sharded ``P("data")`` so each device holds exactly its own
k = N/M replicas, and a checkpoint of the state stores every replica (never one copy
labelled replicated); it restores onto any layout of the same N replicas.
Only the step counter is truly replicated.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from .parallel import mesh_of, replica_sharding, replicated_sharding, resolve_layout


@struct.dataclass
class TrainState:
    step: jax.Array          # int32 scalar, replicated
    params: Any              # leading axis = replica
    opt_state: Any           # leading axis = replica
    model_state: Any         # e.g. BatchNorm statistics; leading axis = replica ({} if none)
    strategy_state: Any      # trigger windows, ring buffers, ...; leading axis = replica


def check_state(state, where: str) -> None:
    """TypeError unless `state` is a TrainState (what `init_state` builds)."""
    if not isinstance(state, TrainState):
        raise TypeError(f"{where} needs a TrainState (built by jaxsel.init_state), got {_kind(state)}")


def check_strategy(strategy, where: str) -> None:
    """TypeError unless `strategy` is a Strategy instance (a name, a class or an optax
    optimizer in its place is named, with what to pass instead)."""
    from .sync import Strategy

    if isinstance(strategy, Strategy):
        return
    if isinstance(strategy, str):
        hint = f"; build one by name with jaxsel.build_strategy({strategy!r})"
    elif isinstance(strategy, type):
        hint = f"; pass an instance, e.g. {strategy.__name__}()"
    elif callable(getattr(strategy, "init", None)) and callable(getattr(strategy, "update", None)):
        hint = " (an optimizer?); the optimizer goes before the strategy"
    else:
        hint = ""
    raise TypeError(f"{where} needs a jaxsel Strategy instance (e.g. jaxsel.SelSync()) as the strategy, got "
                    f"{_kind(strategy)}{hint}")


def check_strategy_state(state: TrainState, strategy, where: str, optimizer=None) -> None:
    """TypeError when `state` was built for another strategy (or, given `optimizer`, another
    optimizer) than the one it is used with, or for other options of it (SelSync's window
    sizes its state), or when its parameters no longer match its optimizer state: their
    layouts or leaf shapes differ. At trace time or before, never a confusing error from
    deep inside a strategy or shard_map. Every leaf but the step carries the replica axis."""
    check_strategy(strategy, where)
    leaves = jax.tree.leaves(state.params)
    if not leaves:   # no parameters: nothing a strategy could keep per parameter
        return
    n = _replica_axis(state, where)
    one = lambda tree: jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x)[1:], x.dtype), tree)
    params = one(state.params)
    if optimizer is not None:
        expected = jax.eval_shape(optimizer.init, params)
        if jax.tree.structure(expected) != jax.tree.structure(one(state.opt_state)):
            raise TypeError(f"{where}: the state's optimizer state is {layout_of(state.opt_state)}, but this "
                            f"optimizer keeps {layout_of(expected)} for these parameters"
                            f"{_paths_unlike(expected, state.opt_state, 'opt_state')}: build the state with "
                            f"init_state(params, optimizer, ...) for the same optimizer and parameters")
        wrong = _first_unlike(expected, one(state.opt_state), "opt_state")
        if wrong is not None:
            raise TypeError(f"{where}: the state's parameters and optimizer state do not belong together ({wrong} "
                            f"for these parameters): build the state with init_state(params, optimizer, ...) from "
                            f"the parameters it trains")
    expected = jax.eval_shape(lambda p, o: strategy.init(p, o, n), params, one(state.opt_state))
    if jax.tree.structure(expected) != jax.tree.structure(one(state.strategy_state)):
        raise TypeError(f"{where}: the state's strategy state is {layout_of(state.strategy_state)}, but "
                        f"{type(strategy).__name__} keeps {layout_of(expected)}"
                        f"{_paths_unlike(expected, state.strategy_state, 'strategy_state')}: build the state with "
                        f"init_state(..., strategy) for the strategy it runs with")
    wrong = _first_unlike(expected, one(state.strategy_state), "strategy_state")
    if wrong is not None:
        raise TypeError(f"{where}: the state was built for other options or parameters than {strategy.describe()} "
                        f"runs with ({wrong}): build the state with init_state(..., strategy) for the strategy it "
                        f"runs with")


def _replica_axis(state: TrainState, where: str) -> int:
    """N, the leading axis of the state's first parameter, which every other leaf of its
    parameters, optimizer, model and strategy states must share (TypeError naming the
    first that does not)."""
    parts = {name: getattr(state, name) for name in ("params", "opt_state", "model_state", "strategy_state")}
    first = jax.tree.leaves(state.params)[0]
    n = np.shape(first)[0] if np.ndim(first) else None
    for name, tree in parts.items():
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
            if n is None or not np.ndim(leaf) or np.shape(leaf)[0] != n:
                raise TypeError(f"{where}: state.{name}{jax.tree_util.keystr(path)} has shape {np.shape(leaf)}, "
                                f"but every leaf of a TrainState but its step starts with the replica axis "
                                f"({'no axis' if n is None else f'{n} replicas'} in its first parameter): build the "
                                f"state with jaxsel.init_state, and replace its leaves by ones of the same layout")
    return int(n)


def _paths_unlike(expected, actual, name: str) -> str:
    """" (opt_state[0].trace['extra'] is not expected)" for the first leaf path that only
    one of two trees of differing structure has, where their leaf paths differ at all."""
    paths = lambda tree: [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]
    want, got = paths(expected), paths(actual)
    extra = next((p for p in got if p not in want), None)
    if extra is not None:
        return f" ({name}{extra} is not expected)"
    missing = next((p for p in want if p not in got), None)
    return f" ({name}{missing} is missing)" if missing is not None else ""


def _first_unlike(expected, actual, name: str) -> str | None:
    """"strategy_state.trigger.window is float32(25, 3) where float32(10, 3) is expected"
    for the first leaf (one replica's) whose shape or dtype differs, else None."""
    pairs = zip(jax.tree_util.tree_flatten_with_path(expected)[0], jax.tree.leaves(actual))
    for (path, want), got in pairs:
        if tuple(want.shape) != tuple(got.shape) or want.dtype != got.dtype:
            return (f"{name}{jax.tree_util.keystr(path)} is {got.dtype}{tuple(got.shape)} per replica where "
                    f"{want.dtype}{tuple(want.shape)} is expected")
    return None


def _kind(x) -> str:
    """What was given, briefly: 'None', "str 'selsync'", 'the class SelSync', 'optax.GradientTransformation'."""
    if x is None or isinstance(x, (str, int, float, bool)):
        return "None" if x is None else f"{type(x).__name__} {x!r}"[:80]
    if isinstance(x, type):
        return f"the class {x.__name__}"
    return f"{type(x).__module__.split('.')[0]}.{type(x).__name__}"


def layout_of(tree, depth: int = 2) -> str:
    """A state's layout by node type, `depth` levels deep: 'TriggeredState(trigger=(),
    samples=None)', '(ScaleByAdamState(count=array, mu={...}, nu={...}), EmptyState())'."""
    if hasattr(tree, "_fields"):   # a NamedTuple state
        if depth <= 0:
            return type(tree).__name__
        fields = ", ".join(f"{f}={layout_of(getattr(tree, f), depth - 1)}" for f in tree._fields)
        return f"{type(tree).__name__}({fields})"
    if isinstance(tree, (tuple, list)):
        return "(" + ", ".join(layout_of(x, depth) for x in tree) + ")"
    if isinstance(tree, dict):
        return "{...}" if tree else "{}"
    return "None" if tree is None else "array" if hasattr(tree, "shape") else type(tree).__name__


def replicate_tree(tree: Any, n: int) -> Any:
    """Stack `n` identical copies along a new leading replica axis."""
    return jax.tree.map(lambda x: jnp.broadcast_to(jnp.asarray(x), (n,) + jnp.shape(x)), tree)


def num_replicas(state: TrainState) -> int:
    """N: the length of the state's leading replica axis (where the replica count lives)."""
    check_state(state, "num_replicas")
    leaves = jax.tree.leaves(state.params)
    if not leaves:
        raise ValueError("num_replicas: the state holds no parameters, so no replica axis")
    return _replica_axis(state, "num_replicas")


def init_state(params: Any, optimizer, strategy, mesh, model_state: Any = None, *,
               replicas: int | None = None) -> TrainState:
    """Replicate `params` (and `model_state`) onto `replicas` replicas (a multiple of the
    devices packs replicas / devices on each) and build all local state. The state's
    leading axis then says N to every later call.

    `mesh`: a Mesh, or a `Layout` (`jaxsel.choose_layout(N)`, which carries N). Without
    `replicas=`: the Layout's N, else the N `data_mesh(replicas=N)` was asked for this
    mesh, else one per device: the count is said once (see `core/parallel.resolve_layout`)."""
    n, mesh = resolve_layout(mesh, replicas, "init_state").replicas, mesh_of(mesh)
    model_state = {} if model_state is None else model_state

    def build(params, model_state):
        opt_state = optimizer.init(params)
        extra = strategy.init(params, opt_state, n)
        return TrainState(
            step=jnp.zeros((), jnp.int32),
            params=replicate_tree(params, n),
            opt_state=replicate_tree(opt_state, n),
            model_state=replicate_tree(model_state, n),
            strategy_state=replicate_tree(extra, n),
        )

    # one sharding per field, a prefix of the state's tree: the state is traced once
    by_replica = replica_sharding(mesh)
    shardings = TrainState(step=replicated_sharding(mesh), params=by_replica, opt_state=by_replica,
                           model_state=by_replica, strategy_state=by_replica)
    return jax.jit(build, out_shardings=shardings)(params, model_state)


@jax.jit
def _mean_over_replicas(tree):
    return jax.tree.map(lambda x: jnp.mean(x, axis=0) if jnp.issubdtype(x.dtype, jnp.floating) else x[0], tree)


def consensus(state: TrainState, strategy=None) -> Any:
    """The parameters a run is evaluated on: the replica average of what `strategy`
    evaluates (its `eval_params`: DiLoCo's and SSD-SGD's global weights, the replicas'
    own weights otherwise). Without a strategy, the replicas' own weights."""
    check_state(state, "consensus")
    if strategy is not None:
        check_strategy_state(state, strategy, "consensus")
    params = state.params if strategy is None else strategy.eval_params(state)
    return _mean_over_replicas(params)


def consensus_model_state(state: TrainState) -> Any:
    """Averaged model state (BatchNorm statistics) across replicas, for evaluation."""
    return _mean_over_replicas(state.model_state)


@jax.jit
def divergence(params: Any) -> jax.Array:
    """Largest L2 distance of one replica's parameters from the replica mean."""
    leaves = [x.astype(jnp.float32) for x in jax.tree.leaves(params)]
    sq = sum(jnp.sum((x - x.mean(0, keepdims=True)) ** 2, axis=tuple(range(1, x.ndim))) for x in leaves)
    return jnp.sqrt(jnp.max(sq))


#: the layouts of TrainState's strategy state, by version (a checkpoint records its own)
STATE_LAYOUTS = {
    1: "string-keyed dicts of jaxsel 0.1",
    2: "typed NamedTuples: SelSync's trigger window, DiLoCo's global weights, ...",
    3: "typed, with post-local SGD as Phases and codec residuals in the triggered state",
}
#: the layout this jaxsel writes and reads
STATE_FORMAT = 3
