"""Which examples each replica reads at each step.

A partition is a pure function of (replica, step): replica r owns a pool of example
indices and walks it in its own random order, reshuffled every pass. Because the order
derives from (seed, replica, pass), a resumed run only needs the step number.

Partitioners: `disjoint` (IID shards), `seldp` (SelSync: everyone walks everything),
`label_skew` (non-IID: each replica owns a few classes) and `dirichlet` (per-class
Dirichlet(alpha) shares). Label-aware ones record the classes each replica owns, which
data injection (injection.py) needs.
"""
from __future__ import annotations

import dataclasses
import math
from functools import lru_cache

import numpy as np

from ..core.checks import is_int


@dataclasses.dataclass(frozen=True)
class Partition:
    pools: tuple[np.ndarray, ...]   # example indices owned by each replica
    seed: int = 0
    name: str = "partition"
    classes: tuple[tuple[int, ...], ...] | None = None  # classes each replica owns (label-aware)

    @property
    def replicas(self) -> int:
        return len(self.pools)

    def _order(self, replica: int, epoch: int) -> np.ndarray:
        return _permutation(self.seed, replica, epoch, len(self.pools[replica]))

    def indices(self, replica: int, step: int, batch_size: int) -> np.ndarray:
        """The `batch_size` example indices replica `replica` reads at `step`."""
        pool = self.pools[replica]
        epoch, offset = divmod(step * batch_size, len(pool))
        if offset + batch_size <= len(pool):   # within one pass (most steps): a slice of its order
            return pool[self._order(replica, epoch)[offset:offset + batch_size]].astype(np.int64, copy=False)
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


def _class_pools(labels: np.ndarray, seed: int) -> dict[int, np.ndarray]:
    """Each class's example indices in a seeded random order."""
    rng = np.random.default_rng([seed, 2**31 - 2])
    return {int(c): rng.permutation(np.flatnonzero(labels == c)) for c in np.unique(labels)}


def label_skew(labels: np.ndarray, replicas: int, seed: int = 0, classes_per_replica: int | str | None = None,
               classes=None) -> Partition:
    """Non-IID label skew (SelSync's non-IID mode: C/N classes per replica).

    Replica r owns `classes_per_replica` = k consecutive classes starting at r*k
    (wrapping), k = ceil(C/N) by default, so every class has an owner; or the explicit
    per-replica class lists `classes`. `classes_per_replica="floor"` is the SelSync
    authors' split (`helper/noniid_datapartitioner.py`, `get_labels_per_rank`): k =
    floor(C/N), replica r owns classes r*k ... r*k + k - 1, and the last C - N*k classes
    belong to nobody (N > C is an error: a replica would own nothing). A class owned by
    several replicas is split between them disjointly; a class nobody owns is left out
    (reachable only through injection).
    """
    labels = np.asarray(labels)
    pools_by_class = _class_pools(labels, seed)
    all_classes = sorted(pools_by_class)
    if classes is None:
        k = _classes_each(classes_per_replica, len(all_classes), replicas)
        classes = [[all_classes[(r * k + j) % len(all_classes)] for j in range(k)] for r in range(replicas)]
    owned = tuple(tuple(sorted({int(c) for c in cs})) for cs in classes)
    if len(owned) != replicas or not all(owned):
        raise ValueError(f"classes must list at least one class for each of the {replicas} replicas")
    unknown = {c for cs in owned for c in cs} - set(all_classes)
    if unknown:
        raise ValueError(f"classes {sorted(unknown)} do not occur in the labels")
    owners = {c: [r for r in range(replicas) if c in owned[r]] for c in all_classes}
    parts: list[list[np.ndarray]] = [[] for _ in range(replicas)]
    for c, idx in pools_by_class.items():
        for i, r in enumerate(owners[c]):
            parts[r].append(idx[i::len(owners[c])])
    pools = tuple(np.sort(np.concatenate(p)) for p in parts)
    return Partition(pools, seed, "label_skew", owned)


label_skew.needs_labels = True

#: `classes_per_replica`'s name for the SelSync authors' floor(C/N) split
FLOOR = "floor"


def _classes_each(classes_per_replica, num_classes: int, replicas: int) -> int:
    """k, the classes each replica owns (ValueError naming a bad `classes_per_replica`)."""
    if classes_per_replica == FLOOR:
        if replicas > num_classes:
            raise ValueError(f"label_skew classes_per_replica=floor gives floor({num_classes}/{replicas}) = 0 "
                             f"classes per replica: it needs at most {num_classes} replicas (the dataset's classes)")
        return num_classes // replicas
    k = math.ceil(num_classes / replicas) if classes_per_replica is None else classes_per_replica
    if not is_int(k) or not 1 <= k <= num_classes:
        raise ValueError(f"classes_per_replica must be in 1..{num_classes} or 'floor', got {k!r}")
    return k


def dirichlet(labels: np.ndarray, replicas: int, seed: int = 0, alpha: float = 0.5, min_size: int = 1,
              max_tries: int = 100) -> Partition:
    """Dirichlet label skew: each class is split across replicas in shares drawn from
    Dirichlet(alpha); small alpha -> few classes per replica, large alpha -> near IID.
    Redrawn (seeded) until every replica holds at least `min_size` examples. A replica
    owns the classes it holds any example of."""
    _check_alpha(alpha)
    labels = np.asarray(labels)
    pools_by_class = _class_pools(labels, seed)
    for attempt in range(max_tries):
        rng = np.random.default_rng([seed, attempt, 2**31 - 3])
        parts: list[list[np.ndarray]] = [[] for _ in range(replicas)]
        for c, idx in pools_by_class.items():
            shares = rng.dirichlet(np.full(replicas, float(alpha)))
            cuts = np.round(np.cumsum(shares)[:-1] * len(idx)).astype(int)
            for r, piece in enumerate(np.split(idx, cuts)):
                parts[r].append(piece)
        pools = tuple(np.sort(np.concatenate(p)) for p in parts)
        if min(len(p) for p in pools) >= min_size:
            owned = tuple(tuple(int(c) for c in np.unique(labels[p])) for p in pools)
            return Partition(pools, seed, f"dirichlet({alpha})", owned)
    raise ValueError(f"dirichlet(alpha={alpha}) left a replica with fewer than {min_size} examples "
                     f"in {max_tries} draws; raise alpha or lower min_size")


dirichlet.needs_labels = True

PARTITIONERS = {"disjoint": disjoint, "seldp": seldp, "label_skew": label_skew, "dirichlet": dirichlet}
#: the options each partitioner takes (`--partition-opt KEY=VALUE`)
PARTITION_OPTIONS = {"disjoint": (), "seldp": (), "label_skew": ("classes_per_replica", "classes"),
                     "dirichlet": ("alpha", "min_size", "max_tries")}




def _check_alpha(alpha) -> None:
    ok = isinstance(alpha, (int, float, np.number)) and not isinstance(alpha, bool) and math.isfinite(alpha)
    if not (ok and alpha > 0):
        raise ValueError(f"dirichlet alpha must be a finite number > 0, got {alpha!r}")


def check_partition_options(name: str, options: dict, replicas: int, num_classes: int | None = None) -> None:
    """ValueError naming a partitioner's unknown option or bad value, before any data is read
    (`num_classes` None: the class count is checked once the labels are)."""
    if name not in PARTITIONERS:
        raise ValueError(f"unknown partition {name!r}; choose one of {', '.join(PARTITIONERS)}")
    allowed = PARTITION_OPTIONS[name]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        theirs = f"its options: {', '.join(allowed)}" if allowed else "it takes no options"
        raise ValueError(f"partition {name!r} has no option {', '.join(map(repr, unknown))}; {theirs}")
    k = options.get("classes_per_replica")
    if k == FLOOR and num_classes:
        _classes_each(k, num_classes, replicas)
    elif k is not None and k != FLOOR and not (is_int(k) and 1 <= k <= (num_classes or k)):
        upper = f"1..{num_classes}" if num_classes else "an integer >= 1"
        raise ValueError(f"label_skew classes_per_replica must be in {upper} (the dataset's classes) or "
                         f"'floor' (the SelSync authors' floor(C/N), the rest dropped), got {k!r}")
    if "alpha" in options:
        _check_alpha(options["alpha"])
    for key in ("min_size", "max_tries"):
        if key in options and not (is_int(options[key]) and options[key] >= 1):
            raise ValueError(f"dirichlet {key} must be an integer >= 1, got {options[key]!r}")


def needs_labels(name: str) -> bool:
    return bool(getattr(PARTITIONERS.get(name), "needs_labels", False))


def make_partition(name: str, labels: np.ndarray | None, replicas: int, seed: int = 0, *,
                   num_examples: int | None = None, **options) -> Partition:
    """Partition by name; `labels` lets label-aware partitioners see the classes (others
    need only `num_examples`, so big sets never read their labels). `options` are the ones
    `check_partition_options` passed (a run's data section checks them, once)."""
    if name not in PARTITIONERS:
        raise ValueError(f"unknown partition {name!r}; choose one of {', '.join(PARTITIONERS)}")
    fn = PARTITIONERS[name]
    if getattr(fn, "needs_labels", False):
        if labels is None:
            raise ValueError(f"partition {name!r} needs labels")
        return fn(labels, replicas, seed=seed, **options)
    return fn(len(labels) if num_examples is None else num_examples, replicas, seed=seed)
