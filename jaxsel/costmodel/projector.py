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

Two networks (`Cluster(inter, intra, per_host)`): hosts of `per_host` replicas, NVLink or
PCIe inside, Ethernet between. A sync over all replicas pays the hierarchical collective
(`cluster_collective_time`); a two-level strategy's group-level collective (a step's
`group_bytes`) is an all-reduce among the group's members inside a host and a barrier for
that group only, so a straggler holds back its own group until the next global barrier.
A plain network is the cluster of one replica per host: the flat model above, unchanged.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping, NamedTuple, Sequence

import numpy as np

from .networks import COLLECTIVES, Cluster, Network, cluster_collective_time, collective_time, get_cluster, \
    get_network, group_level, island_level
from ..core.stragglers import check_finite as _check_finite, check_replicas as _check_replicas, get_stragglers, \
    straggler_factors

BACKGROUND_MODES = ("async", "overlapped")

# ----------------------------------------------------------------------- projection


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
    the same records). `network` is a network (every replica on its own host) or a
    two-level `Cluster`; `groups` is a two-level strategy's replica groups (Timing.groups),
    whose group-level collectives are barriers for their group's members only; `islands`
    island averaging's replicas per island (Timing.islands, `networks.island_level`).
    """

    def __init__(self, network, replicas: int, total_steps: int, stragglers=None, seed: int = 0, *,
                 collective: str = "allreduce", background: str = "async", staleness: int | None = None,
                 groups: int | None = None, islands: int | None = None, state: dict | None = None):
        self.n = _check_replicas(replicas)
        self.cluster = get_cluster(network)
        self.cluster.hosts(self.n)   # the replicas fill whole hosts
        self.net = self.cluster.inter
        if groups is not None and islands is not None:
            raise ValueError(f"a strategy has fixed replica groups (groups={groups}) or random islands "
                             f"(islands={islands}), not both")
        self.groups = (group_level(self.cluster, self.n, groups) if islands is None
                       else island_level(self.cluster, self.n, islands))
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
        self.group_tally = GroupTally(int(st.get("group_syncs", 0)), int(st.get("group_bytes", 0)))

    def state(self) -> dict:
        """JSON-able state to resume the projection from (stored in checkpoints)."""
        return {"clock": self.clock.tolist(), "bg_free": self.bg_free,
                "finished": [f.tolist() for f in self.finished], **self.totals, **self.counts,
                "group_syncs": self.group_tally.syncs, "group_bytes": self.group_tally.bytes}

    def _barrier(self, comm: float) -> None:
        """Everyone waits for the slowest replica; the collective then also waits for a
        background one still in flight (one collective on the network at a time)."""
        slowest = float(self.clock.max())
        start = max(slowest, self.bg_free)
        self.totals["waiting"] += slowest - float(self.clock.mean())
        self.clock[:] = start + comm
        self.totals["communication"] += (start - slowest) + comm

    def _group_barrier(self, payload: int, collective: str) -> None:
        """Each group's members wait for their group's slowest, then all-reduce among
        themselves; other groups' clocks are untouched (a group collective runs on the
        hosts' own links, so it does not wait for a background inter-host collective)."""
        level = self.groups
        if level is None:
            raise ValueError("a record reports a group-level sync but the projection knows no replica groups: "
                             "pass groups= (the strategy's Timing.groups) or a two-level Cluster")
        comm = collective_time(payload, level.size, level.network, collective)
        clocks = self.clock.reshape(-1, level.size)
        slowest = clocks.max(axis=1, keepdims=True)
        self.totals["waiting"] += float((slowest - clocks).mean())
        self.clock = np.repeat(slowest[:, 0] + comm, level.size)
        self.totals["communication"] += comm

    def advance(self, step: int, synced: bool, payload: int, vote: int, compute_s: float,
                collective: str | None = None, *, group_payload: int = 0,
                group_synced: bool | None = None) -> float:
        """Account step `step` (index into the straggler draws); return the time after it.
        `payload` is the all-replica collective's bytes, `group_payload` the group-level
        one's (`group_synced` defaults to group_payload > 0); the group level goes first."""
        if not step < len(self.factors):
            raise ValueError(f"step {step} is beyond the projector's total_steps={len(self.factors)}")
        self._staleness_gate()
        work = compute_s * self.factors[step]
        self.clock += work
        self.totals["compute"] += float(work.mean())
        coll = collective or self.collective
        if group_payload > 0 if group_synced is None else group_synced:
            self._group_barrier(group_payload, coll)
            self.group_tally.add(group_payload)
        if synced or vote > 0:
            comm = cluster_collective_time(vote, self.n, self.cluster) if vote > 0 else 0.0
            if synced and payload > 0:
                comm += cluster_collective_time(payload, self.n, self.cluster, coll)
            self._barrier(comm)
        elif payload > 0:
            self._background(payload, coll)
        if self.staleness is not None:
            self.finished = (self.finished + [self.clock.copy()])[-(self.staleness + 1):]
        self.counts["steps"] += 1
        self.counts["syncs"] += bool(synced)
        self.counts["payload_bytes"] += int(payload) if synced else 0
        self.counts["vote_bytes"] += int(vote)
        return float(max(self.clock.max(), self.bg_free if self.background == "overlapped" else 0.0))

    def _staleness_gate(self) -> None:
        """Async protocols with a bound s: no replica starts step i before all finished step i-s-1."""
        if self.staleness is not None and len(self.finished) > self.staleness:
            gate = float(self.finished[-(self.staleness + 1)].max())
            late = np.maximum(gate - self.clock, 0.0)
            self.totals["waiting"] += float(late.mean())
            self.clock += late

    def _background(self, payload: int, coll: str) -> None:
        """A local step that still moves `payload`, charged by the `background` mode."""
        if self.background == "overlapped":
            slowest = float(self.clock.max())
            start = max(slowest, self.bg_free)
            self.totals["waiting"] += slowest - float(self.clock.mean())
            self.totals["communication"] += start - slowest   # the part not hidden behind compute
            self.clock[:] = start
            self.bg_free = start + cluster_collective_time(payload, self.n, self.cluster, coll)
        else:   # "async": every replica pushes and pulls on its own clock
            ps = parameter_server_time(payload, self.net)
            self.clock += ps
            self.totals["communication"] += ps

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
            "network": self.cluster.describe(self.n),
            "bandwidth_bytes_per_s": self.net.bandwidth,
            "latency_s": self.net.latency,
            "stragglers": ", ".join(m.describe() for m in get_stragglers(self.stragglers)) or "none",
            "background": self.background,
            "staleness": self.staleness,
            "seed": self.seed,
            **self._two_level_summary(),
        }

    def _two_level_summary(self) -> dict:
        """The second network and the group level, where the projection has them (a
        single-network run without groups keeps the summary it always had)."""
        out = {}
        if self.cluster.two_level:
            out.update(per_host=self.cluster.per_host, hosts=self.cluster.hosts(self.n),
                       intra_network=self.cluster.intra.describe(), inter_network=self.net.describe())
        if self.groups is not None and (self.cluster.two_level or self.group_tally.syncs):
            out.update(group_level=self.groups.note, group_syncs=self.group_tally.syncs,
                       group_bytes=self.group_tally.bytes)
        return out


@dataclasses.dataclass
class GroupTally:
    """Group-level collectives projected so far (steps, and bytes per replica)."""

    syncs: int = 0
    bytes: int = 0

    def add(self, nbytes: int) -> None:
        self.syncs += 1
        self.bytes += int(nbytes)


# ------------------------------------------------------------------- logged runs


class StepRecord(NamedTuple):
    """One logged step as the projection charges it (bytes per replica)."""

    synced: bool          # the all-replica collective ran
    payload: int          # its bytes (without vote and group level)
    vote: int             # the all-replica vote's bytes
    collective: str       # "allreduce" or "allgather"
    group_synced: bool    # the group-level collective ran
    group_payload: int    # its bytes


def _scalar(record: Mapping, key: str, i: int):
    if key not in record:
        raise ValueError(f"record {i} has no {key!r} key; records need 'step', 'synced', 'bytes_allreduced' "
                         f"(optionally 'collective', 'vote_bytes', 'group_synced', 'group_bytes')")
    value = np.asarray(record[key])
    if value.size != 1:
        raise ValueError(f"record {i} {key!r} must be a scalar, got shape {value.shape}")
    return value.reshape(()).item()


def _byte_field(record: Mapping, key: str, i: int, at_most: int | None = None) -> int:
    """An integer byte count >= 0 (and <= at_most) of record i."""
    b = _scalar(record, key, i)
    if not (float(b) >= 0 and float(b) == int(b)):
        raise ValueError(f"record {i} {key} must be an integer >= 0, got {b!r}")
    if at_most is not None and int(b) > at_most:
        raise ValueError(f"record {i} {key} must be in [0, {at_most}] (within bytes_allreduced), got {b!r}")
    return int(b)


def _inferred_vote_bytes(raw: list[dict]) -> int:
    """Vote size for records lacking 'vote_bytes': the bytes of local steps (which move
    nothing but the vote and the group level), if they agree; otherwise 0 (no vote)."""
    local = {r["bytes"] - r["group"] for r in raw if not r["synced"] and r["vote"] is None}
    if len(local) > 1:
        raise ValueError(f"local steps report different bytes_allreduced {sorted(local)}; give each record a "
                         f"'vote_bytes' key so votes and payload can be told apart")
    return local.pop() if local else 0


def _read_record(rec, i: int, collective: str) -> dict:
    """Record i's fields, checked (the vote may still be unknown: None)."""
    if not isinstance(rec, Mapping):
        raise ValueError(f"record {i} must be a dict of metrics, got {type(rec).__name__}")
    _scalar(rec, "step", i)
    nbytes = _byte_field(rec, "bytes_allreduced", i)
    vote = None if rec.get("vote_bytes") is None else _byte_field(rec, "vote_bytes", i, nbytes)
    group = 0 if rec.get("group_bytes") is None else _byte_field(rec, "group_bytes", i, nbytes - (vote or 0))
    c = rec.get("collective", collective)
    if c not in COLLECTIVES:
        raise ValueError(f"record {i} collective must be one of {COLLECTIVES}, got {c!r}")
    group_synced = bool(_scalar(rec, "group_synced", i)) if "group_synced" in rec else group > 0
    if group and not group_synced:
        raise ValueError(f"record {i} group_bytes is {group} but group_synced is false; a step that moved "
                         f"group-level bytes synced its groups")
    return {"synced": bool(_scalar(rec, "synced", i)), "bytes": nbytes, "vote": vote, "group": group,
            "collective": c, "group_synced": group_synced}


def step_records(records: Sequence[Mapping], collective: str = "allreduce") -> list[StepRecord]:
    """The training loop's per-step metric dicts as the projection charges them: the
    payload is bytes_allreduced less the vote and the group level's bytes."""
    if isinstance(records, Mapping) or not isinstance(records, Sequence):
        raise ValueError(f"records must be a list of per-step metric dicts, got {type(records).__name__}")
    raw = [_read_record(rec, i, collective) for i, rec in enumerate(records)]
    default_vote = _inferred_vote_bytes(raw)
    out = []
    for r in raw:
        vote = min(default_vote if r["vote"] is None else r["vote"], r["bytes"] - r["group"])
        out.append(StepRecord(r["synced"], r["bytes"] - r["group"] - vote, vote, r["collective"],
                              r["group_synced"], r["group"]))
    return out


def _compute_times(compute_time_s, steps: int) -> np.ndarray:
    """Per-step compute seconds from a scalar or one value per step."""
    compute = np.asarray(compute_time_s, dtype=float)
    if compute.ndim == 0:
        compute = np.full(steps, float(compute))
    if compute.shape != (steps,):
        raise ValueError(f"compute_time_s must be a scalar or have one value per record ({steps}), "
                         f"got shape {compute.shape}")
    if not np.all(np.isfinite(compute)) or np.any(compute < 0):
        raise ValueError(f"compute_time_s must be finite and >= 0, got {compute_time_s!r}")
    return compute


def project_run(
    records: Sequence[Mapping],
    network: "str | Network | Cluster",
    replicas: int,
    compute_time_s,
    stragglers=None,
    seed: int = 0,
    *,
    collective: str = "allreduce",
    background: str = "async",
    staleness: int | None = None,
    groups: int | None = None,
    islands: int | None = None,
) -> tuple[np.ndarray, dict]:
    """Project a logged run onto `network` (or a two-level `Cluster`) with `replicas` workers.

    records: the training loop's per-step metric dicts with `step`, `synced` (bool) and
        `bytes_allreduced` (per replica: synced payload + vote + group-level bytes);
        optional `collective` ("allreduce" default, or "allgather"), `vote_bytes`, and for
        two-level strategies `group_synced` / `group_bytes`. Without `vote_bytes`, the vote
        size is taken from the local steps' bytes (they move only the vote), so SelSync's
        logs split correctly into vote + payload.
    compute_time_s: measured compute seconds per step of one replica (scalar, or one
        value per record).
    stragglers: None, a Stragglers model, a spec string ("fixed:factor=2,replicas=0") or
        a list of those (factors multiply); drawn with `seed`.
    collective / background / staleness / groups / islands: the strategy's `Timing` (the
        sync collective of records without a `collective` key, how local steps that still
        move a payload are charged (see the module docstring), the replica groups of a
        two-level strategy, island averaging's replicas per island).

    Returns (cumulative seconds after each step, summary). The summary's `total` equals
    `compute + waiting + communication`: `compute` is the mean replica's busy time,
    `waiting` the time it idles for slower replicas, `communication` the collectives
    (the parts not hidden behind compute).
    """
    n = _check_replicas(replicas)
    cluster = get_cluster(network)
    steps = step_records(records, collective)
    compute = _compute_times(compute_time_s, len(steps))
    proj = Projector(cluster, n, len(steps), stragglers, seed, collective=collective, background=background,
                     staleness=staleness, groups=groups, islands=islands)
    cumulative = np.array([proj.advance(i, s.synced, s.payload, s.vote, float(compute[i]), s.collective,
                                        group_payload=s.group_payload, group_synced=s.group_synced)
                           for i, s in enumerate(steps)])
    return cumulative, proj.summary()
