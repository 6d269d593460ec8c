"""Projected wall-clock time on clusters we do not have: network + stragglers.

Measured per-step compute time is combined with an analytic model of the collectives
(ring all-reduce / all-gather over `Network(bandwidth, latency)`) and with per-replica
slowdown factors (stragglers). The model answers "how long would this logged run take
on N workers over 10 GbE with one slow worker?" and states its assumptions in every
summary it returns. Pure Python/NumPy: no JAX, no devices.

Timing semantics per step (replica r computes for `compute_time * factor[step, r]`):
  * a step that synchronizes waits for the slowest replica, then pays its collectives;
  * a local step with a per-step vote (SelSync's 4-byte all-reduce) is still a barrier: it
    waits for the slowest replica of that step plus one latency-bound all-reduce;
  * a local step with no vote lets every replica run ahead on its own clock; the next
    barrier (or the end of the run) waits for the replica with the largest summed compute;
  * a local step that still moves a payload is charged by the strategy's `background`
    mode: "overlapped" (SSD-SGD: the collective starts once every replica finished the
    step and runs behind the next step's compute, one at a time) or "async" (SSP/ASP: a
    parameter-server push + pull, 2*latency + 2*B/bandwidth, on the replica's own clock;
    with `staleness` s a replica may not start step i before all finished step i-s-1).
"""
from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

import numpy as np

from .stragglers import check_finite as _check_finite, check_replicas as _check_replicas, get_stragglers, \
    straggler_factors

COLLECTIVES = ("allreduce", "allgather")
BACKGROUND_MODES = ("async", "overlapped")


# --------------------------------------------------------------------------- network


@dataclasses.dataclass(frozen=True)
class Network:
    """A homogeneous link: `bandwidth` in bytes/s per direction, `latency` in seconds
    per message (one hop of the ring). Build custom ones directly: Network(5e9, 20e-6)."""

    bandwidth: float
    latency: float
    name: str = "custom"

    def __post_init__(self):
        object.__setattr__(self, "bandwidth", _check_finite("bandwidth (bytes/s)", self.bandwidth, strict=True))
        object.__setattr__(self, "latency", _check_finite("latency (s)", self.latency))

    def describe(self) -> str:
        """Human-readable assumption, to print beside every projection."""
        return f"{self.name}: {self.bandwidth / 1e9:g} GB/s per direction, {self.latency * 1e6:g} us latency per hop"


#: Assumed figures (effective per-direction bandwidth, per-hop latency):
#:   nvlink  200 GB/s,     5 us  (NVLink 3/4 NCCL bus bandwidth within one node)
#:   100gbe  12.5 GB/s,   10 us  (100 Gbit/s line rate, RDMA/RoCE-class latency)
#:   25gbe   3.125 GB/s,  25 us  (25 Gbit/s line rate)
#:   10gbe   1.25 GB/s,   50 us  (10 Gbit/s line rate, TCP)
#:   1gbe    0.125 GB/s, 100 us  (1 Gbit/s line rate, TCP)
#: Line rates are upper bounds; pass a custom Network for measured figures.
NETWORKS: dict[str, Network] = {
    "nvlink": Network(200e9, 5e-6, "nvlink"),
    "100gbe": Network(100e9 / 8, 10e-6, "100gbe"),
    "25gbe": Network(25e9 / 8, 25e-6, "25gbe"),
    "10gbe": Network(10e9 / 8, 50e-6, "10gbe"),
    "1gbe": Network(1e9 / 8, 100e-6, "1gbe"),
}


def get_network(spec: str | Network) -> Network:
    """A preset by name (case-insensitive; see NETWORKS) or a Network unchanged."""
    if isinstance(spec, Network):
        return spec
    key = str(spec).lower()
    if key not in NETWORKS:
        raise ValueError(f"unknown network preset {spec!r}; choose one of {', '.join(NETWORKS)} "
                         f"or pass Network(bandwidth=bytes_per_s, latency=seconds)")
    return NETWORKS[key]


# ----------------------------------------------------------------------- collectives


def allreduce_time(nbytes, replicas: int, network: str | Network) -> float:
    """Ring all-reduce of `nbytes` per replica: 2(N-1)*latency + 2(N-1)/N * B/bandwidth.

    Reduce-scatter then all-gather, each N-1 hops moving B/N bytes; zero for N = 1 or B = 0.
    """
    b = _check_finite("nbytes", nbytes)
    n = _check_replicas(replicas)
    net = get_network(network)
    if n == 1 or b == 0:
        return 0.0
    return 2 * (n - 1) * net.latency + 2 * (n - 1) / n * b / net.bandwidth


def allgather_time(nbytes, replicas: int, network: str | Network) -> float:
    """Ring all-gather of `nbytes` per replica (result N*B): (N-1)*latency + (N-1)/N * N*B/bandwidth."""
    b = _check_finite("nbytes", nbytes)
    n = _check_replicas(replicas)
    net = get_network(network)
    if n == 1 or b == 0:
        return 0.0
    return (n - 1) * net.latency + (n - 1) / n * (n * b) / net.bandwidth


def collective_time(nbytes, replicas: int, network: str | Network, collective: str = "allreduce") -> float:
    """Time of the named collective (an aggregator's `collective` attribute)."""
    if collective == "allreduce":
        return allreduce_time(nbytes, replicas, network)
    if collective == "allgather":
        return allgather_time(nbytes, replicas, network)
    raise ValueError(f"collective must be one of {COLLECTIVES}, got {collective!r}")


def vote_time(replicas: int, network: str | Network, vote_bytes: int = 4) -> float:
    """A scalar vote (SelSync's 4-byte sum of votes): an all-reduce whose cost is all latency."""
    return allreduce_time(vote_bytes, replicas, network)


# ----------------------------------------------------------------------- projection


def _scalar(record: Mapping, key: str, i: int):
    if key not in record:
        raise ValueError(f"record {i} has no {key!r} key; records need 'step', 'synced', 'bytes_allreduced' "
                         f"(optionally 'collective', 'vote_bytes')")
    value = np.asarray(record[key])
    if value.size != 1:
        raise ValueError(f"record {i} {key!r} must be a scalar, got shape {value.shape}")
    return value.reshape(()).item()


def _inferred_vote_bytes(synced: np.ndarray, nbytes: np.ndarray, given: list) -> int:
    """Vote size for records lacking 'vote_bytes': the bytes of local steps (which move
    nothing but the vote), if they agree; otherwise 0 (no vote)."""
    local = {int(b) for s, b, g in zip(synced, nbytes, given) if not s and g is None}
    if len(local) > 1:
        raise ValueError(f"local steps report different bytes_allreduced {sorted(local)}; give each record a "
                         f"'vote_bytes' key so votes and payload can be told apart")
    return local.pop() if local else 0


def parameter_server_time(nbytes, network: str | Network) -> float:
    """One worker's push of `nbytes` to a parameter server and pull of the model back."""
    b = _check_finite("nbytes", nbytes)
    net = get_network(network)
    return 0.0 if b == 0 else 2 * net.latency + 2 * b / net.bandwidth


class Projector:
    """The projection advanced one step at a time (the training loop's live estimate).

    `advance(...)` takes one step's outcome and returns the projected seconds since the
    start; `state()` / `Projector(..., state=...)` carry it across a checkpoint. Straggler
    factors are drawn once for `total_steps` (so a live projection equals `project_run` on
    the same records).
    """

    def __init__(self, network, replicas: int, total_steps: int, stragglers=None, seed: int = 0, *,
                 collective: str = "allreduce", background: str = "async", staleness: int | None = None,
                 state: dict | None = None):
        self.n = _check_replicas(replicas)
        self.net = get_network(network)
        if collective not in COLLECTIVES:
            raise ValueError(f"collective must be one of {COLLECTIVES}, got {collective!r}")
        if background not in BACKGROUND_MODES:
            raise ValueError(f"background must be one of {BACKGROUND_MODES}, got {background!r}")
        if staleness is not None and (isinstance(staleness, bool) or not isinstance(staleness, (int, np.integer))
                                      or staleness < 0):
            raise ValueError(f"staleness must be an integer >= 0 or None (unbounded), got {staleness!r}")
        self.collective, self.background = collective, background
        self.staleness = None if staleness is None else int(staleness)
        self.stragglers, self.seed = stragglers, int(seed)
        self.factors = straggler_factors(stragglers, total_steps, self.n, seed)
        st = state or {}
        self.clock = np.asarray(st.get("clock", np.zeros(self.n)), dtype=float)   # each replica's own clock
        if self.clock.shape != (self.n,):
            raise ValueError(f"projector state is for {self.clock.size} replicas, this run has {self.n}")
        self.bg_free = float(st.get("bg_free", 0.0))         # when the background collective ends
        self.finished = [np.asarray(f, dtype=float) for f in st.get("finished", [])]  # recent per-step ends
        self.totals = {k: float(st.get(k, 0.0)) for k in ("compute", "communication", "waiting")}
        self.counts = {k: int(st.get(k, 0)) for k in ("steps", "syncs", "payload_bytes", "vote_bytes")}

    def state(self) -> dict:
        """JSON-able state to resume the projection from (stored in checkpoints)."""
        return {"clock": self.clock.tolist(), "bg_free": self.bg_free,
                "finished": [f.tolist() for f in self.finished], **self.totals, **self.counts}

    def _barrier(self, comm: float) -> None:
        """Everyone waits for the slowest replica; the collective then also waits for a
        background one still in flight (one collective on the network at a time)."""
        slowest = float(self.clock.max())
        start = max(slowest, self.bg_free)
        self.totals["waiting"] += slowest - float(self.clock.mean())
        self.clock[:] = start + comm
        self.totals["communication"] += (start - slowest) + comm

    def advance(self, step: int, synced: bool, payload: int, vote: int, compute_s: float,
                collective: str | None = None) -> float:
        """Account step `step` (index into the straggler draws); return the time after it."""
        if not step < len(self.factors):
            raise ValueError(f"step {step} is beyond the projector's total_steps={len(self.factors)}")
        if self.staleness is not None and len(self.finished) > self.staleness:
            gate = float(self.finished[-(self.staleness + 1)].max())   # all finished step i-s-1
            late = np.maximum(gate - self.clock, 0.0)
            self.totals["waiting"] += float(late.mean())
            self.clock += late
        work = compute_s * self.factors[step]
        self.clock += work
        self.totals["compute"] += float(work.mean())
        coll = collective or self.collective
        if synced or vote > 0:
            comm = vote_time(self.n, self.net, vote) if vote > 0 else 0.0
            if synced and payload > 0:
                comm += collective_time(payload, self.n, self.net, coll)
            self._barrier(comm)
        elif payload > 0 and self.background == "overlapped":
            slowest = float(self.clock.max())
            start = max(slowest, self.bg_free)
            self.totals["waiting"] += slowest - float(self.clock.mean())
            self.totals["communication"] += start - slowest   # the part not hidden behind compute
            self.clock[:] = start
            self.bg_free = start + collective_time(payload, self.n, self.net, coll)
        elif payload > 0:   # "async": every replica pushes and pulls on its own clock
            ps = parameter_server_time(payload, self.net)
            self.clock += ps
            self.totals["communication"] += ps
        if self.staleness is not None:
            self.finished = (self.finished + [self.clock.copy()])[-(self.staleness + 1):]
        self.counts["steps"] += 1
        self.counts["syncs"] += bool(synced)
        self.counts["payload_bytes"] += int(payload) if synced else 0
        self.counts["vote_bytes"] += int(vote)
        return float(max(self.clock.max(), self.bg_free if self.background == "overlapped" else 0.0))

    def summary(self) -> dict:
        """Totals so far, ending the run with its slowest replica and last background collective:
        `total` = `compute` + `waiting` + `communication`."""
        waiting = self.totals["waiting"] + float(self.clock.max() - self.clock.mean())
        tail = max(0.0, self.bg_free - float(self.clock.max()))
        total = float(self.clock.max()) + tail
        return {
            "total": total if self.counts["steps"] else 0.0,
            "compute": self.totals["compute"],
            "communication": self.totals["communication"] + tail,
            "waiting": waiting if self.counts["steps"] else 0.0,
            **self.counts,
            "replicas": self.n,
            "network": self.net.describe(),
            "bandwidth_bytes_per_s": self.net.bandwidth,
            "latency_s": self.net.latency,
            "stragglers": ", ".join(m.describe() for m in get_stragglers(self.stragglers)) or "none",
            "background": self.background,
            "staleness": self.staleness,
            "seed": self.seed,
        }


def project_run(
    records: Sequence[Mapping],
    network: str | Network,
    replicas: int,
    compute_time_s,
    stragglers=None,
    seed: int = 0,
    *,
    collective: str = "allreduce",
    background: str = "async",
    staleness: int | None = None,
) -> tuple[np.ndarray, dict]:
    """Project a logged run onto `network` with `replicas` workers.

    records: the training loop's per-step metric dicts with `step`, `synced` (bool) and
        `bytes_allreduced` (per replica: synced payload + vote bytes); optional
        `collective` ("allreduce" default, or "allgather") and `vote_bytes`. Without
        `vote_bytes`, the vote size is taken from the local steps' bytes (they move only
        the vote), so SelSync's logs split correctly into vote + payload.
    compute_time_s: measured compute seconds per step of one replica (scalar, or one
        value per record).
    stragglers: None, a Stragglers model, a spec string ("fixed:factor=2,replicas=0") or
        a list of those (factors multiply); drawn with `seed`.
    collective / background / staleness: the sync collective of records without a
        `collective` key, and how local steps that still move a payload are charged (see
        the module docstring); strategies name theirs (`Strategy.timing`).

    Returns (cumulative seconds after each step, summary). The summary's `total` equals
    `compute + waiting + communication`: `compute` is the mean replica's busy time,
    `waiting` the time it idles for slower replicas, `communication` the collectives
    (the parts not hidden behind compute).
    """
    n = _check_replicas(replicas)
    net = get_network(network)
    if isinstance(records, Mapping) or not isinstance(records, Sequence):
        raise ValueError(f"records must be a list of per-step metric dicts, got {type(records).__name__}")
    steps = len(records)

    compute = np.asarray(compute_time_s, dtype=float)
    if compute.ndim == 0:
        compute = np.full(steps, float(compute))
    if compute.shape != (steps,):
        raise ValueError(f"compute_time_s must be a scalar or have one value per record ({steps}), "
                         f"got shape {compute.shape}")
    if not np.all(np.isfinite(compute)) or np.any(compute < 0):
        raise ValueError(f"compute_time_s must be finite and >= 0, got {compute_time_s!r}")

    synced = np.zeros(steps, bool)
    nbytes = np.zeros(steps, np.int64)
    given_votes: list = []
    collectives: list[str] = []
    for i, rec in enumerate(records):
        if not isinstance(rec, Mapping):
            raise ValueError(f"record {i} must be a dict of metrics, got {type(rec).__name__}")
        _scalar(rec, "step", i)
        synced[i] = bool(_scalar(rec, "synced", i))
        b = _scalar(rec, "bytes_allreduced", i)
        if not (float(b) >= 0 and float(b) == int(b)):
            raise ValueError(f"record {i} bytes_allreduced must be an integer >= 0, got {b!r}")
        nbytes[i] = int(b)
        v = rec.get("vote_bytes")
        if v is not None:
            v = _scalar(rec, "vote_bytes", i)
            if not (0 <= int(v) <= nbytes[i]):
                raise ValueError(f"record {i} vote_bytes must be in [0, bytes_allreduced={nbytes[i]}], got {v!r}")
        given_votes.append(None if v is None else int(v))
        c = rec.get("collective", collective)
        if c not in COLLECTIVES:
            raise ValueError(f"record {i} collective must be one of {COLLECTIVES}, got {c!r}")
        collectives.append(c)

    default_vote = _inferred_vote_bytes(synced, nbytes, given_votes)
    votes = np.array([default_vote if g is None else g for g in given_votes], dtype=np.int64)
    votes = np.minimum(votes, nbytes)  # a record whose bytes are all vote
    payload = nbytes - votes

    proj = Projector(net, n, steps, stragglers, seed, collective=collective, background=background,
                     staleness=staleness)
    cumulative = np.array([proj.advance(i, bool(synced[i]), int(payload[i]), int(votes[i]), float(compute[i]),
                                        collectives[i]) for i in range(steps)])
    return cumulative, proj.summary()
