"""Mesh construction, multi-host start-up and host <-> global array helpers.

Every jaxsel step runs under `jax.shard_map` over a 1-D mesh whose single axis is
named ``"data"``. N model replicas sit on M devices, k = N/M on each (packed along the
step's local vmap axis); `data_mesh(replicas=N)` builds that layout on the default
backend's devices (the accelerator's when there is one) and never falls back to CPU
silently.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import weakref
from typing import Any, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

AXIS = "data"
#: Steps a loop may leave unfinished on CPU devices: with many collective steps queued,
#: XLA:CPU can abort the process (core/pacing.py says why and how the wait is kept).
#: Accelerators never wait per step.
CPU_MAX_INFLIGHT = 8


def request_cpu_devices(n: int) -> bool:
    """Ask XLA for `n` CPU devices; must run before JAX initialises its backends. Whether
    the count is `n` now (False: the user's ``JAX_NUM_CPU_DEVICES``, honoured, or the
    backends were started already and keep what they have).

    Harmless on GPU hosts (it only shapes the CPU backend).
    """
    if "JAX_NUM_CPU_DEVICES" in os.environ:
        return False
    try:
        jax.config.update("jax_num_cpu_devices", int(n))
    except RuntimeError:  # backends already initialised: keep what exists
        return False
    return True


#: whether this process has one CPU device because its job packs every replica there
_one_for_packing = False


def request_one_cpu_device_for_packing() -> None:
    """Ask for one CPU device where a job will pack every replica on one (analysis/
    job_layout.py): XLA's pool of threads that execute programs has a thread per CPU device,
    8 on a 2-core machine for one device's work (BENCHMARKS.md, "Where the frontier's time
    goes": the same bits in 0.92 of the time and 0.85 of the memory). The packing rule then
    counts the devices a run would have spread over (`one_cpu_device_for_packing`)."""
    global _one_for_packing
    _one_for_packing = request_cpu_devices(1) or _one_for_packing


def one_cpu_device_for_packing() -> bool:
    """Whether this process's one CPU device was asked for a packing job."""
    return _one_for_packing


class LayoutError(ValueError):
    """The replicas do not fit the devices (a usage error: one line, exit 2)."""


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where N replicas go: the devices used and how many replicas each holds.

    The replica count lives here (and in the state's leading axis), not in the mesh: a
    `jax.sharding.Mesh` is JAX's own type, and the mesh of a packed layout is simply the
    mesh of its devices."""

    devices: tuple
    per_device: int

    @property
    def replicas(self) -> int:
        return len(self.devices) * self.per_device

    @functools.cached_property
    def mesh(self) -> Mesh:
        """The 1-D mesh (axis "data") of the devices that hold the replicas."""
        return jax.make_mesh((len(self.devices),), (AXIS,), axis_types=(jax.sharding.AxisType.Explicit,),
                             devices=list(self.devices))

    def describe(self) -> str:
        """The true layout, e.g. "8 replicas on 1 x GPU (NVIDIA H100 80GB HBM3), 8 per device";
        multi-host: "... on 2 processes x 2 x CPU (cpu), 2 per device"."""
        first = self.devices[0]
        processes = len({getattr(d, "process_index", 0) for d in self.devices})
        m = len(self.devices)
        where = f"{m} x" if processes == 1 else f"{processes} processes x {m // processes} x"
        return (f"{self.replicas} replicas on {where} {_platform_name(first)} "
                f"({getattr(first, 'device_kind', '?')}), {self.per_device} per device")


def plan_layout(replicas: int | None, devices: Sequence[Any]) -> Layout:
    """Place `replicas` on `devices` (in order): one per device on the first N when
    N <= M, else k = N/M on every device when M divides N, else a LayoutError that names
    the valid replica counts. `None`: one replica per device."""
    devices = tuple(devices)
    m = len(devices)
    if m == 0:
        raise LayoutError("no devices to place replicas on")
    if replicas is None:
        return Layout(devices, 1)
    if isinstance(replicas, bool) or not isinstance(replicas, (int, np.integer)) or replicas < 1:
        raise LayoutError(f"replicas must be an integer >= 1, got {replicas!r}")
    n = int(replicas)
    if n <= m:
        return Layout(devices[:n], 1)
    if n % m:
        kind = _platform_name(devices[0])
        raise LayoutError(f"replicas={n} do not fit {m} {kind} device(s): choose 1..{m} or a multiple "
                          f"of {m} ({', '.join(str(m * i) for i in range(2, 5))}, ...)")
    return Layout(devices, n // m)


def backend_devices(platform: str | None = None) -> list:
    """The devices replicas go on: the default backend's (an accelerator when there is
    one), or `platform`'s when asked (e.g. "cpu"). Never a silent fall-back."""
    if platform is None:
        return jax.devices()
    try:
        return jax.devices(platform)
    except RuntimeError as err:
        raise LayoutError(f"platform {platform!r} is not available here ({str(err).splitlines()[0]}); "
                          f"the default is {jax.default_backend()!r}") from None


def choose_layout(replicas: int | None = None, *, devices: Sequence[Any] | int | None = None,
                  platform: str | None = None) -> Layout:
    """Where `replicas` go (see `data_mesh`), without building a mesh."""
    pool = backend_devices(platform)
    if isinstance(devices, int) and not isinstance(devices, bool):
        if not 1 <= devices <= len(pool):
            raise LayoutError(f"devices={devices}: choose 1..{len(pool)} ({_platform_name(pool[0])})")
        pool = pool[:devices]
    elif devices is not None:
        pool = list(devices)
    return plan_layout(replicas, pool)


#: The replica counts `data_mesh` was asked for, by mesh. A `jax.sharding.Mesh` is JAX's
#: own interned type (one object per device list) and cannot carry N, so the count said to
#: `data_mesh` is kept here for `init_state` to read: N is said once. Held weakly.
_ASKED: "weakref.WeakKeyDictionary[Mesh, set[int]]" = weakref.WeakKeyDictionary()


def data_mesh(replicas: int | None = None, *, devices: Sequence[Any] | int | None = None,
              platform: str | None = None) -> Mesh:
    """The plain `jax.sharding.Mesh` (1-D, axis "data") of the devices that hold
    `replicas` model replicas: the first N devices when N <= M, all M when N/M are packed
    on each (see `plan_layout`). `init_state(..., mesh)` then builds N replicas without
    being told again (`asked_replicas`); the step reads N from the state's leading axis.

    devices: a list, or an int (the first that many of the platform's devices); default
    all of `platform`'s devices (default: the default backend's)."""
    layout = choose_layout(replicas, devices=devices, platform=platform)
    _ASKED.setdefault(layout.mesh, set()).add(layout.replicas)
    return layout.mesh


def asked_replicas(mesh: Mesh, where: str = "init_state") -> int | None:
    """The replica count `data_mesh` was asked for `mesh` (None when it built no such mesh:
    then one replica per device). The same devices asked for two counts give one mesh
    object (JAX interns meshes), so which was meant is unknown: a LayoutError in one line
    asking for `replicas=`, never a silent choice."""
    asked = _ASKED.get(mesh, set()) if isinstance(mesh, Mesh) else set()
    if len(asked) > 1:
        counts = " and ".join(str(n) for n in sorted(asked))
        raise LayoutError(f"{where}: this mesh was built by data_mesh for {counts} replicas (one jax Mesh serves "
                          f"both): pass replicas=N, or the Layout from jaxsel.choose_layout(N)")
    return next(iter(asked), None)


def resolve_layout(mesh: "Mesh | Layout", replicas: int | None = None, where: str = "init_state") -> Layout:
    """The layout a call given `mesh` (a Mesh, or a `Layout`, which carries N) and
    `replicas` means: `replicas` when given, else the layout's N, else the count
    `data_mesh` was asked for this mesh, else one per device. A LayoutError when a Layout
    and `replicas` disagree."""
    if isinstance(mesh, Layout):
        if replicas is not None and replicas != mesh.replicas:
            raise LayoutError(f"{where}: replicas={replicas!r} disagrees with the layout's {mesh.replicas} "
                              f"replicas: pass one of them")
        return mesh
    return mesh_layout(mesh, asked_replicas(mesh, where) if replicas is None else replicas)


def mesh_of(mesh: "Mesh | Layout") -> Mesh:
    """The mesh of a Mesh or a Layout (where a Layout is accepted in a mesh's place)."""
    return mesh.mesh if isinstance(mesh, Layout) else mesh


def mesh_layout(mesh: Mesh, replicas: int | None = None) -> Layout:
    """The layout of `replicas` on `mesh`'s devices (None: one per device); a LayoutError
    unless they split evenly."""
    devices = tuple(mesh.devices.flat)
    n = len(devices) if replicas is None else replicas
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1 or n % len(devices):
        raise LayoutError(f"replicas={replicas!r} do not split over the mesh's {len(devices)} device(s): choose "
                          f"a multiple of {len(devices)}")
    return Layout(devices, int(n) // len(devices))


def _platform_name(device) -> str:
    return str(getattr(device, "platform", "?")).upper()


def describe_layout(mesh: Mesh, replicas: int | None = None) -> str:
    """The true layout of `replicas` on `mesh` (None: the count `data_mesh` was asked for
    it, else one per device), e.g. "8 replicas on 1 x GPU (NVIDIA H100 80GB HBM3), 8 per
    device"."""
    return mesh_layout(mesh, _told_or_asked(mesh, replicas, "describe_layout")).describe()


def _told_or_asked(mesh: Mesh, replicas: int | None, where: str) -> int | None:
    """`replicas` when given, else what `data_mesh` was asked for `mesh` (N is said once)."""
    return replicas if replicas is not None else asked_replicas(mesh, where)


def replica_sharding(mesh) -> NamedSharding:
    """Leading axis split over replicas: replica-divergent state and batches (`mesh`: a
    Mesh or a Layout)."""
    return NamedSharding(mesh_of(mesh), P(AXIS))


def replicated_sharding(mesh) -> NamedSharding:
    return NamedSharding(mesh_of(mesh), P())


def global_batch(batch: Any, mesh) -> Any:
    """Place a host batch (leading dim = replicas * b) on the mesh, split over devices
    (each device gets its k replicas' rows, in replica order).

    Single process: `batch` is the whole global batch. Multi-process: `batch` is this
    process's rows only (its devices' replicas), assembled with
    `jax.make_array_from_process_local_data`.
    """
    sharding = replica_sharding(mesh)
    if jax.process_count() == 1:
        return jax.tree.map(lambda x: _place(x, sharding), batch)
    return jax.tree.map(
        lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)), batch
    )


def _place(x: Any, sharding: NamedSharding) -> jax.Array:
    """One host array on the mesh, each device given its own rows (a view of `x`) directly:
    the same array as `jax.device_put(x, sharding)` at about 3/4 of its host time per batch
    (measured on 8 CPU devices: 0.52 against 0.73 ms for an MNIST-1D batch). Arrays that are
    already on devices are moved by `jax.device_put`."""
    if not isinstance(x, np.ndarray):
        return jax.device_put(x, sharding)
    return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])


def local_replica_ids(mesh: Mesh, replicas: int | None = None) -> list[int]:
    """Global indices of the replicas on this process's devices (device d holds
    replicas d * k ... d * k + k - 1, k = replicas / devices; replicas None: as for
    `describe_layout`)."""
    k = mesh_layout(mesh, _told_or_asked(mesh, replicas, "local_replica_ids")).per_device
    devs = list(mesh.devices.flat)
    return [d * k + j for d, dev in enumerate(devs) if dev.process_index == jax.process_index() for j in range(k)]
