"""Which examples each replica reads at each step.

A partition is a pure function of (replica, step): replica r owns a pool of example
indices and walks it in its own random order, reshuffled every pass. Because the order
derives from (seed, replica, pass), a resumed run only needs the step number.
"""
from __future__ import annotations

import dataclasses
from functools import lru_cache

import numpy as np


@dataclasses.dataclass(frozen=True)
class Partition:
    pools: tuple[np.ndarray, ...]   # example indices owned by each replica
    seed: int = 0
    name: str = "partition"

    @property
    def replicas(self) -> int:
        return len(self.pools)

    def _order(self, replica: int, epoch: int) -> np.ndarray:
        return _permutation(self.seed, replica, epoch, len(self.pools[replica]))

    def indices(self, replica: int, step: int, batch_size: int) -> np.ndarray:
        """The `batch_size` example indices replica `replica` reads at `step`."""
        pool = self.pools[replica]
        positions = step * batch_size + np.arange(batch_size)
        epochs, offsets = np.divmod(positions, len(pool))
        out = np.empty(batch_size, dtype=np.int64)
        for e in np.unique(epochs):
            sel = epochs == e
            out[sel] = pool[self._order(replica, int(e))[offsets[sel]]]
        return out

    def steps_per_epoch(self, batch_size: int) -> int:
        """Steps for the smallest pool to be read once."""
        return max(1, min(len(p) for p in self.pools) // batch_size)


@lru_cache(maxsize=256)
def _permutation(seed: int, replica: int, epoch: int, n: int) -> np.ndarray:
    return np.random.default_rng([seed, replica, epoch]).permutation(n)


def disjoint(num_examples: int, replicas: int, seed: int = 0) -> Partition:
    """Disjoint, near-equal random shards: each example belongs to exactly one replica."""
    perm = np.random.default_rng([seed, 2**31 - 1]).permutation(num_examples)
    return Partition(tuple(np.sort(perm[r::replicas]) for r in range(replicas)), seed, "disjoint")


def seldp(num_examples: int, replicas: int, seed: int = 0) -> Partition:
    """SelSync's SelDP: every replica walks the whole training set in its own order."""
    return Partition(tuple(np.arange(num_examples) for _ in range(replicas)), seed, "seldp")


PARTITIONERS = {"disjoint": disjoint, "seldp": seldp}


def make_partition(name: str, labels: np.ndarray, replicas: int, seed: int = 0, **options) -> Partition:
    """Partition by name; `labels` lets label-aware partitioners see the classes."""
    if name not in PARTITIONERS:
        raise ValueError(f"unknown partition {name!r}; choose one of {', '.join(PARTITIONERS)}")
    fn = PARTITIONERS[name]
    if getattr(fn, "needs_labels", False):
        return fn(labels, replicas, seed=seed, **options)
    return fn(len(labels), replicas, seed=seed)
