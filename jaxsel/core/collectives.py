"""Collectives over all N replicas, wherever they sit: k packed on each of M devices.

The step runs a device's k = N/M replicas as a `vmap` (axis name `LOCAL`) inside the
`shard_map` over the mesh axis ("data"). A collective over replicas is therefore two
stages, implemented here once: a reduction over the device's local replicas, then the
collective over the mesh axis (mean: local mean then pmean; sum: local sum then psum;
gather: the local stack, then all_gather, in global replica order d * k + j).

The local stage is a `custom_vmap` rule that sees the device's whole stack of k values
and returns one value that is *not* batched, so a decision computed from it stays a
scalar and `lax.cond` stays a real conditional. Outside the step's vmap (an aggregator
called directly inside a `shard_map`) the local stage sees one replica. Why not a vmap
axis name in `lax.psum`: with shard_map's replication (vma) checks on, JAX rejects
collectives over a vmap axis inside a shard_map.

Use these, not `lax.pmean(x, "data")`, in a strategy, trigger or aggregator: a raw mesh
collective reduces over devices only, so each packed replica would see another value
(the sync core raises an error when an aggregate still differs across local replicas).

Group collectives (two-level methods): `Groups(axis, G)` in place of the axis makes every
`replica_*` function reduce within G contiguous blocks of replicas (group g = replicas
g*s ... (g+1)*s-1, s = N/G), so any aggregator works per group unchanged. A group either
spans whole devices (s a multiple of k: the local fold, then an `all_gather` among the
group's devices, folded in group order) or lies inside one device (k a multiple of s:
purely local, the result batched over the device's replicas). Why gather, not psum: JAX
(0.10) refuses `psum` with `axis_index_groups` inside a shard_map, and folding the gathered
values in one fixed order leaves every member of a group bit-identical.

Dynamic groups (island averaging: a fresh random split of the replicas at each sync):
`replica_segment_sum` sums every replica's value into the row of its segment, the same
rows on every replica, so each replica reads its own group's sum; the split is traced, so
the collective is one `psum` of `count` rows, not a grouped one.

Outside jaxsel's own step (a user's `shard_map` or `vmap` running `jaxsel.as_optax`), the
axis is a `ReplicaAxes`: the mesh axis (or axes, or none) over devices and the vmap axis
of a device's packed replicas (or none), named by the user. The two stages are the same;
only the names differ. A plain string is jaxsel's own layout: that mesh axis, and the
step's vmap `LOCAL`.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.custom_batching import custom_vmap

from .cell_axis import per_cell, under_cell_vmap

LOCAL = "replicas"   # vmap axis name of a device's packed replicas (inside the step)


class ReplicaAxes(NamedTuple):
    """Where the replicas live when a user's code, not jaxsel's step, maps them (an optax
    transformation's `axis_name`): `mesh`, the mesh axis or axes over devices (None: one
    device), and `local`, the vmap axis of each device's packed replicas (None: one
    replica per device). Replica d * k + j is device d's j-th packed replica."""

    mesh: str | tuple[str, ...] | None
    local: str | None


def replica_axes(axis) -> ReplicaAxes:
    """`axis` as a ReplicaAxes: a plain string is jaxsel's own step (that mesh axis and `LOCAL`)."""
    return axis if isinstance(axis, ReplicaAxes) else ReplicaAxes(axis, LOCAL)


def mesh_axes(axis) -> tuple[str, ...]:
    """The mesh axis names `axis` spans (what shard_map's varying types name)."""
    mesh = replica_axes(axis).mesh
    return () if mesh is None else (mesh,) if isinstance(mesh, str) else tuple(mesh)


def local_count(axis: Any = None) -> int:
    """k: replicas on this device (1 outside the vmap of packed replicas)."""
    name = replica_axes(axis).local if axis is not None else LOCAL
    if name is None:
        return 1
    try:
        return int(lax.axis_size(name))
    except NameError:
        return 1


def local_stack(x, axis: Any = None) -> jax.Array:
    """The device's k local replicas' values of `x`, stacked on a new leading axis (not batched)."""
    k = local_count(axis)

    @custom_vmap
    def stack(v):   # reached only with an unbatched v: every local replica holds the same value
        return jnp.broadcast_to(v[None], (k,) + jnp.shape(v))

    @stack.def_vmap
    def stack_rule(axis_size, in_batched, v):
        if under_cell_vmap(LOCAL):   # a cell batch (cell_axis.py): each cell's own stack
            return per_cell(stack.fun, in_batched, v)
        return v, False   # the batch (replica) axis, now an ordinary leading axis of one value

    return stack(jnp.asarray(x))


def _over_mesh(collective, x, axis):
    """`collective` over the mesh axes of `axis`; `x` itself on one device."""
    mesh = replica_axes(axis).mesh
    return x if mesh is None else collective(x, mesh)


def _mesh_size(axis) -> int:
    mesh = replica_axes(axis).mesh
    return 1 if mesh is None else int(lax.axis_size(mesh))


def varies_across_local_replicas(x) -> bool:
    """True when `x` (traced inside the step) may differ between a device's packed replicas."""
    seen: list[bool] = []

    @custom_vmap
    def probe(v):
        return v

    @probe.def_vmap
    def probe_rule(axis_size, in_batched, v):
        if under_cell_vmap(LOCAL):
            return v, in_batched[0]
        seen.append(bool(in_batched[0]))
        return v, in_batched[0]

    probe(jnp.asarray(x))
    return any(seen)


class PackedReplicasDisagree(TypeError):
    """A value meant to be identical on every replica differs across a device's packed replicas."""


def must_agree(x, message: str, error: type = PackedReplicasDisagree):
    """`x`, unchanged; tracing raises error(message) where `x` turns out to
    be batched over the packed replicas. (Checked when the step's vmap reaches `x`, which
    inside a `lax.cond` branch is after the branch is traced, so a plain check would miss it.)"""
    @custom_vmap
    def agreed(v):
        return v

    @agreed.def_vmap
    def agreed_rule(axis_size, in_batched, v):
        if under_cell_vmap(LOCAL):   # cells differ; a cell's replicas agree (checked by their own vmap)
            return v, in_batched[0]
        if in_batched[0]:
            raise error(message)
        return v, False

    return agreed(jnp.asarray(x))


def _fold(combine, stack):
    """combine(...combine(combine(s[0], s[1]), s[2])..., s[k-1]): the local replicas in
    order, slice by slice. (XLA:CPU reduces over a leading axis far slower than it adds
    the slices: BENCHMARKS.md, "Packed replicas".)"""
    out = stack[0]
    for i in range(1, stack.shape[0]):
        out = combine(out, stack[i])
    return out


def _two_stage(local_combine, mesh_collective):
    def reduce(tree, axis):
        if isinstance(axis, Groups):
            return jax.tree.map(lambda x: _group_reduce(local_combine, x, axis), tree)
        return jax.tree.map(lambda x: _over_mesh(mesh_collective, _fold(local_combine, local_stack(x, axis)), axis),
                            tree)
    return reduce


_sum = _two_stage(jnp.add, lax.psum)
_max = _two_stage(jnp.maximum, lax.pmax)
_min = _two_stage(jnp.minimum, lax.pmin)


def replica_sum(tree: Any, axis) -> Any:
    """Sum over all N replicas (identical result on every replica), or within each group
    when `axis` is a `Groups`."""
    return _sum(tree, axis)


def replica_mean(tree: Any, axis) -> Any:
    """Mean over all N replicas (or a group's): the local sum, `psum` over the devices, divided by N."""
    n = replica_count(axis)
    return jax.tree.map(lambda x: (x / n).astype(x.dtype), _sum(tree, axis))


def replica_max(tree: Any, axis) -> Any:
    return _max(tree, axis)


def replica_min(tree: Any, axis) -> Any:
    return _min(tree, axis)


def replica_gather(tree: Any, axis) -> Any:
    """Every replica's value (a group's, for `Groups`), stacked in global replica order:
    shape (N, *x.shape), or (N/G, *x.shape) within a group."""
    if isinstance(axis, Groups):
        return jax.tree.map(lambda x: _group_gather(x, axis), tree)

    def gather(x):
        local = local_stack(x, axis)
        every = _over_mesh(lax.all_gather, local, axis) if mesh_axes(axis) else local[None]  # (M, k, ...)
        return every.reshape((-1,) + local.shape[1:])
    return jax.tree.map(gather, tree)


def replica_segment_sum(x, segments: jax.Array, count: int, axis) -> jax.Array:
    """(count, *x.shape): row s is the sum of `x` over the replicas r with segments[r] == s,
    the same on every replica. `segments` (N,) int must be the same on every replica (drawn
    from the replicated step: islands of a random permutation); replicas whose segment is
    outside 0..count-1 add nothing. Each device adds its packed replicas into their rows, in
    order, then one `psum` over the devices: `count` model-sized rows cross the mesh, where
    an all_gather of the replicas would move N."""
    segments = must_agree(segments, "replica_segment_sum: the segments differ across a device's packed "
                                    "replicas; derive them from the replicated step, not from the replica")
    local = local_stack(x, axis)                        # (k, ...)
    k = local.shape[0]
    mesh = replica_axes(axis).mesh
    first = (lax.axis_index(mesh) if mesh_axes(axis) else 0) * k
    mine = lax.dynamic_slice_in_dim(segments, first, k)
    rows = jnp.zeros((count,) + local.shape[1:], local.dtype)
    for j in range(k):
        rows = rows.at[mine[j]].add(local[j], mode="drop")
    return _over_mesh(lax.psum, rows, axis)


def replica_count(axis) -> int:
    """N: the devices on `axis` times the replicas each holds (a group's size for `Groups`)."""
    if isinstance(axis, Groups):
        return group_layout(axis).size
    return _mesh_size(axis) * local_count(axis)


def replica_index(axis, ctx=None) -> jax.Array:
    """This replica's global index d * k + j (the step passes it in `ctx.replica`); for
    `Groups`, its index within its group."""
    if isinstance(axis, Groups):
        return replica_index(axis.axis, ctx) % group_layout(axis).size
    index = getattr(ctx, "replica", None)
    if index is not None:
        return index
    if local_count(axis) != 1:
        raise ValueError("replica_index inside a packed step needs the StepContext (ctx.replica)")
    return lax.axis_index(replica_axes(axis).mesh) if mesh_axes(axis) else jnp.int32(0)


# ------------------------------------------------------------------ groups of replicas

class Groups(NamedTuple):
    """A reduction scope: `groups` contiguous blocks of the replicas on mesh axis `axis`
    (group g = replicas g*s ... (g+1)*s-1, s = N / groups). Pass it wherever a collective
    or an aggregator takes the axis to combine within each group."""

    axis: Any          # a mesh axis name, or a ReplicaAxes
    groups: int


class GroupLayout(NamedTuple):
    size: int        # s: replicas per group
    per_device: int  # k: replicas per device
    devices: int     # M: devices on the axis


def group_layout(scope: Groups) -> GroupLayout:
    """The group size against the packing, checked at trace time (ValueError, one line)."""
    m, k = _mesh_size(scope.axis), local_count(scope.axis)
    n, g = m * k, scope.groups
    if isinstance(g, bool) or not isinstance(g, int) or g < 1 or n % g:
        raise ValueError(f"groups={g!r} must be a whole number dividing the {n} replicas")
    s = n // g
    if s % k and k % s:
        raise ValueError(f"groups={g}: a group of {s} replicas neither spans whole devices nor lies inside "
                         f"one ({k} replicas per device on {m} devices); choose groups so that N/groups is "
                         f"a multiple or a divisor of {k}")
    return GroupLayout(s, k, m)


def _group_reduce(combine, x, scope: Groups):
    """combine over the replicas of this replica's group, in group order."""
    lay = group_layout(scope)
    if lay.size < lay.per_device:
        return _within_device(lambda blocks: _fold(combine, jnp.moveaxis(blocks, 1, 0)), x, lay)
    folded = _fold(combine, local_stack(x, scope.axis))   # this device's replicas
    span = lay.size // lay.per_device                 # devices per group
    return folded if span == 1 else _fold(combine, _gather_devices(folded, scope.axis, span, lay.devices))


def _group_gather(x, scope: Groups):
    lay = group_layout(scope)
    if lay.size < lay.per_device:
        return _within_device(lambda blocks: blocks, x, lay)
    local = local_stack(x, scope.axis)                # (k, ...)
    span = lay.size // lay.per_device
    every = local[None] if span == 1 else _gather_devices(local, scope.axis, span, lay.devices)
    return every.reshape((-1,) + local.shape[1:])     # (span * k, ...) in replica order


def _gather_devices(x, axis, span: int, devices: int):
    """x of the `span` consecutive devices of this device's group, stacked: (span, ...)."""
    mesh = replica_axes(axis).mesh
    if span == devices:
        return lax.all_gather(x, mesh)
    blocks = [list(range(d, d + span)) for d in range(0, devices, span)]
    return lax.all_gather(x, mesh, axis_index_groups=blocks)


def _within_device(per_group, x, lay: GroupLayout):
    """A group of s replicas inside one device: `per_group(blocks)` maps the (groups, s, ...)
    blocks of the device's replicas (group order) to one result per group; every replica
    gets its own group's result (batched over the local replicas)."""
    s = lay.size

    @custom_vmap
    def grouped(v):   # unbatched: every replica of the group holds v
        return per_group(jnp.broadcast_to(v[None, None], (1, s) + jnp.shape(v)))[0]

    @grouped.def_vmap
    def grouped_rule(axis_size, in_batched, v):
        if under_cell_vmap(LOCAL):
            return per_cell(grouped.fun, in_batched, v)
        if axis_size % s:
            raise ValueError(f"a group of {s} replicas does not divide the {axis_size} local replicas")
        if not in_batched[0]:
            v = jnp.broadcast_to(v[None], (axis_size,) + jnp.shape(v))
        out = per_group(v.reshape((axis_size // s, s) + v.shape[1:]))
        return jnp.repeat(out, s, axis=0), True

    return grouped(jnp.asarray(x))
