"""DeMo, Decoupled Momentum Optimization (Peng, Quesnelle & Kingma 2024, Algorithm 1).

Why: instead of averaging gradients, every replica keeps its own momentum and sends only
its fastest-moving components (the largest DCT coefficients of each chunk), a few
percent of the bytes of an all-reduce; what stays behind keeps accumulating locally.
DeMo is the optimizer: the run's optimizer (and its learning-rate schedule) is not used.

One step, for every parameter tensor p (identical on all replicas; momentum m_i per
replica, zeros at the start; g_i its gradient):

    p   <- p * (1 - lr * weight_decay)
    m_i <- beta * m_i + lr * g_i
    q_i  = per chunk, the `topk` DCT-II coefficients of m_i of largest magnitude
    m_i <- m_i - IDCT(q_i)             the transmitted components leave the momentum
    Q    = all-gather of every q_i; per coefficient the mean over the replicas that sent
           it, 0 where none did (average_over="replicas": the sum over all N / N)
    p   <- p - lr * sign(IDCT(Q))      sign(0) = 0

The momentum accumulates lr * g, as the authors' code does (the paper's notation
accumulates g: the same steps at a constant lr, since every step above is invariant to
one positive factor on all momenta). Defaults are the authors' code's: chunk 64, topk
32, beta 0.999, weight decay 0; they give no learning rate (DeMo takes SGD's): a run's
`--lr` and `--weight-decay` are DeMo's unless `--opt lr=` / `--opt weight_decay=` set its
own (1e-3 and 0 from Python), and the run's schedule is not applied. Bytes per replica and step: 8 per coefficient
sent (a float32 value and an int32 index in its chunk), in an all-gather.
Chunking and transforms: `jaxsel.core.dct`.
"""
from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp

from ..core.budget import sweep
from ..core import dct
from ..core.aggregate import Aggregator
from ..core.checks import check_int, check_number
from ..core.collectives import replica_count, replica_gather
from ..core.sync import STRATEGIES, Strategy
from .traits import method_traits

AVERAGE_OVER = ("senders", "replicas")


class DeMoState(NamedTuple):
    momentum: Any   # this replica's decoupled momentum, float32, shaped like the parameters


class Sent(NamedTuple):
    """One tensor's transmitted coefficients: (chunks, k) values and their indices."""

    values: Any
    indices: Any


@dataclasses.dataclass(frozen=True)
class SendersMean(Aggregator):
    """Every replica's sparse coefficients gathered; per coefficient, the mean over the
    replicas that sent it (or the sum / N). `sizes`: each tensor's chunk size h*w."""

    sizes: tuple[int, ...] = ()
    over: str = "senders"
    collective: ClassVar[str] = "allgather"

    def __call__(self, tree, axis, ctx=None):
        n = replica_count(axis)
        return [self._combine(replica_gather(sent.values, axis), replica_gather(sent.indices, axis), size, n)
                for sent, size in zip(tree, self.sizes)]

    def _combine(self, values, indices, size: int, n: int):
        """(chunks, size) dense Q from every replica's (N, chunks, k) values and indices."""
        rows = jnp.broadcast_to(jnp.arange(values.shape[1])[None, :, None], values.shape)
        total = jnp.zeros((values.shape[1], size), jnp.float32).at[rows, indices].add(values)
        if self.over == "replicas":
            return total / n
        senders = jnp.zeros((values.shape[1], size), jnp.float32).at[rows, indices].add(1.0)
        return jnp.where(senders > 0, total / jnp.maximum(senders, 1.0), 0.0)


@STRATEGIES.register("demo")
@method_traits(budget=sweep("topk", None, 4))
@dataclasses.dataclass(frozen=True)
class DeMo(Strategy):
    """lr: the step size (a run's --lr unless set here: DeMo replaces the run's optimizer,
    as the authors' DeMo takes SGD's lr); beta: the momentum
    decay; chunk: the chunk length target s; topk: coefficients sent per chunk;
    weight_decay; average_over: "senders" (the authors' code) or "replicas"."""

    lr: float = 1e-3
    """DeMo's step size (DeMo replaces the run's optimizer; the authors take SGD's lr)"""
    beta: float = 0.999
    """momentum decay"""
    chunk: int = 64
    """chunk length of the DCT (the target s)"""
    topk: int = 32
    """DCT coefficients sent per chunk"""
    weight_decay: float = 0.0
    """decoupled weight decay on the parameters"""
    average_over: str = "senders"
    """senders: per coefficient, the mean over the replicas that sent it (the authors' code); replicas: the sum over
    all N, / N"""
    name: ClassVar[str] = "demo"
    own_optimizer: ClassVar[bool] = True
    #: unset in a run: the run's --lr and --weight-decay (DeMo is the run's optimizer)
    context_fields: ClassVar[tuple[str, ...]] = ("lr", "weight_decay")

    def __post_init__(self):
        check_number("lr", self.lr, positive=True)
        check_number("weight_decay", self.weight_decay, positive=False)
        if not 0.0 <= float(self.beta) < 1.0:
            raise ValueError(f"beta must be in [0, 1), got {self.beta!r}")
        check_int("chunk", self.chunk, 1)
        check_int("topk", self.topk, 1)
        if self.average_over not in AVERAGE_OVER:
            raise ValueError(f"average_over must be one of {', '.join(AVERAGE_OVER)}, got {self.average_over!r}")

    def init(self, params, opt_state, n):
        return DeMoState(jax.tree.map(lambda p: jnp.zeros(jnp.shape(p), jnp.float32), params))

    def apply(self, rs, grads, stats, ctx):
        lr = float(self.lr)
        params, treedef = jax.tree.flatten(rs.params)
        momenta, sent, sizes = [], [], []
        for m, g in zip(jax.tree.leaves(rs.strategy_state.momentum), jax.tree.leaves(grads)):
            m = float(self.beta) * m + lr * g.astype(jnp.float32)
            coeffs = dct.encode(m, self.chunk)
            values, indices = dct.top_coefficients(coeffs, self.topk)
            momenta.append(m - dct.decode(dct.scatter(values, indices, coeffs.shape[-1]), m.shape, self.chunk))
            sent.append(Sent(values, indices))
            sizes.append(coeffs.shape[-1])
        combined = ctx.sync(True, sent, SendersMean(tuple(sizes), self.average_over))
        new = [(p * (1.0 - lr * float(self.weight_decay))
                - lr * jnp.sign(dct.decode(q, p.shape, self.chunk))).astype(p.dtype)
               for p, q in zip(params, combined)]
        return rs.replace(params=jax.tree.unflatten(treedef, new),
                          strategy_state=DeMoState(jax.tree.unflatten(treedef, momenta)))

    def describe(self) -> str:
        return (f"demo (lr {self.lr:g}, beta {self.beta:g}, top {self.topk} of each {self.chunk}-chunk's "
                f"DCT, mean over {self.average_over}; the run's optimizer unused)")
