"""Splitting a model's parameters into fragments that synchronize separately (Streaming DiLoCo).

A fragment is a set of parameter leaves (tensors), named by their positions in tree order
(`jax.tree.leaves`). Two deterministic rules:

- "contiguous": the leaves in tree order cut into P runs of consecutive leaves, balanced by
  size: the k-th cut (k = 1 ... P-1) goes before the leaf where the running element count
  comes closest to k/P of the total (ties: the earlier leaf), keeping every run non-empty.
  Neighbouring tensors (a layer's kernel and bias) travel together, as the paper's groups of
  consecutive layers do.
- "strided": leaf i goes to fragment i mod P (the paper's strided layer assignment, applied
  to tensors): each fragment samples the whole depth of the network.

Every leaf is in exactly one fragment and no fragment is empty, so P can be at most the
number of leaves.
"""
from __future__ import annotations

from typing import Any, Sequence

FRAGMENT_RULES = ("contiguous", "strided")


def check_rule(fragment_by: str) -> None:
    if fragment_by not in FRAGMENT_RULES:
        raise ValueError(f"fragment_by must be one of {', '.join(FRAGMENT_RULES)}; got {fragment_by!r}")


def split_leaves(sizes: Sequence[int], parts: int, fragment_by: str = "contiguous") -> tuple[tuple[int, ...], ...]:
    """Leaf positions of each of `parts` fragments, for leaves of the given element counts."""
    check_rule(fragment_by)
    n = len(sizes)
    if not 1 <= parts <= n:
        raise ValueError(f"fragments={parts} needs 1 <= fragments <= the model's {n} parameter "
                         f"tensor(s) (every fragment holds at least one)")
    if fragment_by == "strided":
        return tuple(tuple(range(p, n, parts)) for p in range(parts))
    running = [0]
    for s in sizes:
        running.append(running[-1] + int(s))
    cuts = [0]
    for k in range(1, parts):
        target = k * running[-1] / parts
        allowed = range(cuts[-1] + 1, n - (parts - k) + 1)   # leave a leaf for each later fragment
        cuts.append(min(allowed, key=lambda i: (abs(running[i] - target), i)))
    cuts.append(n)
    return tuple(tuple(range(a, b)) for a, b in zip(cuts, cuts[1:]))


def take(leaves: Sequence[Any], positions: Sequence[int]) -> tuple:
    """The fragment's leaves, in order."""
    return tuple(leaves[i] for i in positions)


def put(leaves: list, positions: Sequence[int], values: Sequence[Any]) -> None:
    """Write a fragment's leaves back into the flat list (in place)."""
    for i, v in zip(positions, values):
        leaves[i] = v
