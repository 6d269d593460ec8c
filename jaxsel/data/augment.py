"""On-device input transform: random crop + horizontal flip, then normalisation.

Raw uint8 batches go to the device (4x fewer bytes than float32); this jitted function
turns them into normalised float32 inside the training step's own program, so it costs
no extra dispatch and no host work. It runs per replica (`shard_map` over the data
axis) on that replica's rows, with a key derived from (seed, step, replica): a run is
reproducible and a resumed run augments exactly as the uninterrupted one.
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P

from ..core.parallel import AXIS, mesh_layout
from .catalog import DatasetSpec


def _stats(spec: DatasetSpec, xp):
    mean = xp.asarray(spec.mean, xp.float32) if spec.mean is not None else None
    std = xp.asarray(spec.std, xp.float32) if spec.std is not None else None
    return mean, std


def normalize(x, spec: DatasetSpec):
    """`(x / scale - mean) / std` in float32 (per channel, last axis)."""
    x = x.astype(jnp.float32) / jnp.float32(spec.scale)
    mean, std = _stats(spec, jnp)
    if mean is not None:
        x = (x - mean) / std
    return x


def normalize_np(x: np.ndarray, spec: DatasetSpec) -> np.ndarray:
    """The host twin of `normalize` (evaluation sets)."""
    x = x.astype(np.float32) / np.float32(spec.scale)
    mean, std = _stats(spec, np)
    if mean is not None:
        x = (x - mean) / std
    return x


def random_crop_flip(images, key, padding: int, flip: bool = True):
    """Per image: zero-pad `padding` pixels each side, crop back at a random offset,
    mirror left-right with probability 1/2 (the CIFAR/ResNet recipe)."""
    n, h, w, c = images.shape
    k_crop, k_flip = jax.random.split(key)
    if padding:
        offsets = jax.random.randint(k_crop, (n, 2), 0, 2 * padding + 1)
        padded = jnp.pad(images, ((0, 0), (padding, padding), (padding, padding), (0, 0)))
        images = jax.vmap(lambda im, o: lax.dynamic_slice(im, (o[0], o[1], 0), (h, w, c)))(padded, offsets)
    if flip:
        mirror = jax.random.bernoulli(k_flip, 0.5, (n,))
        images = jnp.where(mirror[:, None, None, None], images[:, :, ::-1, :], images)
    return images


def make_device_transform(spec: DatasetSpec, mesh, seed: int = 0, augment: bool | None = None, *,
                          replicas: int | None = None) -> Callable | None:
    """`transform(batch, step) -> batch` on global arrays of `replicas` replicas' rows (None:
    one per device of `mesh`), or None when nothing is to do (token batches).
    `augment=None` uses the dataset's default."""
    if spec.tokens:
        return None
    augment = spec.augment if augment is None else bool(augment)
    key = spec.input_key

    sharding = NamedSharding(mesh, P(AXIS))
    per_device = mesh_layout(mesh, replicas).per_device

    def replica_crop_flip(x, step):
        """Each replica's rows with a key of (seed, step, global replica index), so the
        augmentation does not depend on how replicas are packed onto devices."""
        rows = x.reshape((per_device, -1) + x.shape[1:])
        replica = lax.axis_index(AXIS) * per_device + jnp.arange(per_device)
        base = jax.random.fold_in(jax.random.key(seed), step)
        crop = lambda r, i: random_crop_flip(r, jax.random.fold_in(base, i), spec.crop_padding)
        return jax.vmap(crop)(rows, replica).reshape(x.shape)

    def local(batch, step):
        x = batch[key]
        if augment and x.ndim == 4:
            x = replica_crop_flip(x, step)
        return {**batch, key: normalize(x, spec)}

    sharded = jax.shard_map(local, mesh=mesh, in_specs=(P(AXIS), P()), out_specs=P(AXIS))

    @jax.jit
    def transform(batch, step):
        return sharded(jax.tree.map(lambda x: jax.reshard(x, sharding), batch), step)

    return transform


def with_device_transform(step_fn, transform: Callable | None, mesh):
    """The train step with `transform(batch, state.step)` fused in front of it (one jit)."""
    if transform is None:
        return step_fn

    def step(state, batch):
        return step_fn(state, transform(batch, state.step))

    batch_sharding = NamedSharding(mesh, P(AXIS))
    return jax.jit(step, donate_argnums=(0,), in_shardings=(None, batch_sharding))
