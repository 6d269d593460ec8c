"""SelSync's data injection for non-IID partitions.

Each step, replica i adds samples of ceil(alpha * C) classes it does not own, beta*b*N/C
samples per injected class (C classes, N replicas, per-replica batch b), drawn from the
whole training set. Which classes and which samples is a pure function of
(seed, replica, step), like the partition itself, so resumed runs replay it exactly.

Equal shard sizes: the step splits the global batch evenly over replicas, so every
replica must inject the same number of samples. We use one alpha for all replicas and
always inject exactly k = ceil(alpha * C) classes x m = max(1, round(beta*b*N/C))
samples: the per-replica batch grows from b to b + k*m (the global batch to N*(b + k*m)).
A replica that owns fewer than k foreign classes draws its k classes from the ones it
lacks with repetition; a replica that owns every class cannot inject and is an error.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from .partition import Partition, needs_labels

_STREAM = 0x1A5E  # keeps injection draws apart from the partition's own orders


@dataclasses.dataclass(frozen=True)
class Injection:
    alpha: float
    beta: float
    classes_per_step: int                  # k = ceil(alpha * C)
    per_class: int                         # m = max(1, round(beta * b * N / C))
    foreign: tuple[np.ndarray, ...]        # per replica: classes it does not own
    by_class: dict                         # class -> example indices (whole training set)
    seed: int = 0

    @classmethod
    def build(cls, partition: Partition, labels: np.ndarray, batch_size: int, alpha: float, beta: float,
              seed: int = 0) -> "Injection":
        check_alpha_beta(alpha, beta)
        if partition.classes is None:
            raise ValueError(f"data injection needs a label-aware partition (label_skew or dirichlet), "
                             f"not {partition.name!r}: every replica already sees every class")
        labels = np.asarray(labels)
        classes = np.unique(labels)
        c, n = len(classes), partition.replicas
        foreign = tuple(np.setdiff1d(classes, owned) for owned in partition.classes)
        for r, f in enumerate(foreign):
            if len(f) == 0:
                raise ValueError(f"replica {r} owns every class, so it has nothing to inject; use "
                                 f"fewer classes per replica or a smaller dirichlet alpha")
        by_class = {int(k): np.flatnonzero(labels == k) for k in classes}
        return cls(float(alpha), float(beta), math.ceil(alpha * c),
                   max(1, round(beta * batch_size * n / c)), foreign, by_class, seed)

    @property
    def extra(self) -> int:
        """Samples every replica adds each step."""
        return self.classes_per_step * self.per_class

    def classes(self, replica: int, step: int) -> np.ndarray:
        """The classes replica `replica` injects at `step` (none of them owned)."""
        return self._draw(replica, step)[0]

    def indices(self, replica: int, step: int) -> np.ndarray:
        """The `extra` example indices replica `replica` adds at `step`."""
        return self._draw(replica, step)[1]

    def _draw(self, replica: int, step: int):
        rng = np.random.default_rng([self.seed, replica, step, _STREAM])
        pool = self.foreign[replica]
        k = self.classes_per_step
        chosen = rng.choice(pool, size=k, replace=k > len(pool))
        picks = []
        for c in chosen:
            members = self.by_class[int(c)]
            picks.append(members[rng.choice(len(members), size=self.per_class,
                                            replace=self.per_class > len(members))])
        return chosen, np.concatenate(picks).astype(np.int64)


def check_alpha_beta(alpha, beta) -> None:
    """ValueError naming a bad injection alpha (a share of the classes) or beta (a batch share)."""
    if not (isinstance(alpha, (int, float)) and math.isfinite(alpha) and 0 < alpha <= 1):
        raise ValueError(f"injection alpha must be in (0, 1] (--inject ALPHA,BETA), got {alpha!r}")
    if not (isinstance(beta, (int, float)) and math.isfinite(beta) and beta > 0):
        raise ValueError(f"injection beta must be a finite number > 0 (--inject ALPHA,BETA), got {beta!r}")


def check_injection(partition: str, value) -> None:
    """Injection settings checked before any data is read: two good numbers and a partition
    that gives replicas classes of their own."""
    try:
        alpha, beta = parse_injection(value)
    except (TypeError, ValueError, KeyError):
        raise ValueError(f"injection must be (alpha, beta), got {value!r}") from None
    check_alpha_beta(alpha, beta)
    if not needs_labels(partition):
        raise ValueError(f"data injection needs a label-aware partition (label_skew or dirichlet), not "
                         f"{partition!r}: every replica already sees every class")


def parse_injection(value) -> tuple[float, float] | None:
    """(alpha, beta) from a tuple/list, a {"alpha", "beta"} dict or an "alpha,beta" string."""
    if value is None or value is False:
        return None
    if isinstance(value, str):
        value = value.split(",")
    if isinstance(value, dict):
        value = (value["alpha"], value["beta"])
    alpha, beta = (float(v) for v in value)
    return alpha, beta
