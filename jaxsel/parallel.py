"""Mesh construction, multi-host start-up and host <-> global array helpers.

Every jaxsel step runs under `jax.shard_map` over a 1-D mesh whose single axis is
named ``"data"``: one model replica per device.
"""
from __future__ import annotations

import os
from typing import Any, Sequence

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

AXIS = "data"


def request_cpu_devices(n: int) -> None:
    """Ask XLA for `n` CPU devices; must run before JAX initialises its backends.

    Harmless on GPU hosts (it only shapes the CPU backend). Honours an explicit
    ``JAX_NUM_CPU_DEVICES`` set by the user.
    """
    if "JAX_NUM_CPU_DEVICES" in os.environ:
        return
    try:
        jax.config.update("jax_num_cpu_devices", int(n))
    except RuntimeError:  # backends already initialised: keep what exists
        pass


def devices_for(replicas: int | None) -> list:
    """Pick `replicas` devices: the default backend's if it has enough, else CPU's."""
    devs = jax.devices()
    if replicas is None:
        return devs
    if len(devs) >= replicas:
        return devs[:replicas]
    cpus = jax.devices("cpu")
    if len(cpus) >= replicas:
        return cpus[:replicas]
    raise ValueError(
        f"replicas={replicas} but only {len(devs)} {devs[0].platform} device(s) and "
        f"{len(cpus)} CPU device(s) exist; set JAX_NUM_CPU_DEVICES={replicas} before "
        f"JAX starts, or choose replicas <= {max(len(devs), len(cpus))}"
    )


def data_mesh(devices: Sequence[Any] | int | None = None) -> jax.sharding.Mesh:
    """A 1-D mesh with axis ``"data"`` over `devices` (default: all devices).

    An int picks that many devices (see `devices_for`).
    """
    if devices is None or isinstance(devices, int):
        devices = devices_for(devices)
    devices = list(devices)
    return jax.make_mesh(
        (len(devices),), (AXIS,), axis_types=(jax.sharding.AxisType.Explicit,), devices=devices
    )


def num_replicas(mesh: jax.sharding.Mesh) -> int:
    return int(mesh.shape[AXIS])


def replica_sharding(mesh) -> NamedSharding:
    """Leading axis split over replicas: replica-divergent state and batches."""
    return NamedSharding(mesh, P(AXIS))


def replicated_sharding(mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def global_batch(batch: Any, mesh) -> Any:
    """Place a host batch (leading dim = replicas * b) on the mesh, split over replicas.

    Single process: `batch` is the whole global batch. Multi-process: `batch` is this
    process's rows only (its devices' replicas), assembled with
    `jax.make_array_from_process_local_data`.
    """
    sharding = replica_sharding(mesh)
    if jax.process_count() == 1:
        return jax.device_put(batch, sharding)
    return jax.tree.map(
        lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)), batch
    )


def local_replica_ids(mesh) -> list[int]:
    """Replica indices (positions on the data axis) whose device this process owns."""
    devs = list(mesh.devices.flat)
    return [i for i, d in enumerate(devs) if d.process_index == jax.process_index()]
