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
#:   pcie    25 GB/s,     10 us  (PCIe 4.0 x16: 31.5 GB/s line rate per direction, ~80% of it
#:                               after protocol overhead; GPUs of one host without NVLink)
#:   100gbe  12.5 GB/s,   10 us  (100 Gbit/s line rate, RDMA/RoCE-class latency)
#:   25gbe   3.125 GB/s,  25 us  (25 Gbit/s line rate)
#:   10gbe   1.25 GB/s,   50 us  (10 Gbit/s line rate, TCP)
#:   1gbe    0.125 GB/s, 100 us  (1 Gbit/s line rate, TCP)
#: Line rates are upper bounds; pass a custom Network for measured figures. Every preset
#: can join the replicas of a host (`Cluster.intra`) or the hosts (`Cluster.inter`).
NETWORKS: dict[str, Network] = {
    "nvlink": Network(200e9, 5e-6, "nvlink"),
    "pcie": Network(25e9, 10e-6, "pcie"),
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


# ------------------------------------------------------------------- two-level clusters


@dataclasses.dataclass(frozen=True)
class Cluster:
    """Hosts of `per_host` replicas each: `intra` joins the replicas of one host (NVLink,
    PCIe), `inter` joins the hosts (Ethernet) through one link per host, shared by its
    replicas. `per_host` = 1 is the single network of the flat model: every replica is a
    host of its own and `intra` is never used. Networks may be given by preset name."""

    inter: Network
    intra: Network = dataclasses.field(default_factory=lambda: NETWORKS["nvlink"])
    per_host: int = 1

    def __post_init__(self):
        object.__setattr__(self, "inter", get_network(self.inter))
        object.__setattr__(self, "intra", get_network(self.intra))
        p = self.per_host
        if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p < 1:
            raise ValueError(f"replicas per host (gpus per host) must be an integer >= 1, got {p!r}")
        object.__setattr__(self, "per_host", int(p))

    @property
    def two_level(self) -> bool:
        return self.per_host > 1

    def hosts(self, replicas: int) -> int:
        """Hosts that `replicas` fill (they must fill every host)."""
        n = _check_replicas(replicas)
        if n % self.per_host:
            raise ValueError(f"replicas {n} must be a multiple of the replicas per host ({self.per_host}): "
                             f"every host holds the same number")
        return n // self.per_host

    def label(self, replicas: int) -> str:
        """A short name for tables: the network's, or "4 hosts x 8 (nvlink inside, 10gbe between)"."""
        if not self.two_level:
            return self.inter.name
        return (f"{self.hosts(replicas)} hosts x {self.per_host} ({self.intra.name} inside, "
                f"{self.inter.name} between)")

    def describe(self, replicas: int | None = None) -> str:
        """The assumption to print beside a projection (a single network: as Network.describe)."""
        if not self.two_level:
            return self.inter.describe()
        hosts = f"{self.hosts(replicas)} hosts x {self.per_host}" if replicas else f"hosts of {self.per_host}"
        return (f"{hosts} replicas; inside a host {self.intra.describe()}; "
                f"between hosts {self.inter.describe()}")


def get_cluster(spec: "str | Network | Cluster") -> Cluster:
    """A Cluster unchanged; a network (preset name or Network) as a single-network cluster."""
    return spec if isinstance(spec, Cluster) else Cluster(get_network(spec))


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


def cluster_collective_time(nbytes, replicas: int, cluster: "str | Network | Cluster",
                            collective: str = "allreduce") -> float:
    """A collective over all `replicas` of a two-level cluster (H hosts x s per host).

    All-reduce, hierarchical: reduce-scatter inside each host, then s all-reduces of the
    B/s shards among the H hosts, all through the host's one inter-host link (so B bytes
    cross it, as in a ring of H), then all-gather inside each host. In time:
    `T = [2(s-1)*lat_intra + 2(s-1)/s * B/bw_intra] + [2(H-1)*lat_inter + 2(H-1)/H * B/bw_inter]`
    = allreduce_time(B, s, intra) + allreduce_time(B, H, inter).
    All-gather (result N*B): member j of every host gathers the B bytes of member j of the
    other hosts (s rings sharing the host's link), then each host all-gathers its H*B blocks:
    allgather_time(s*B, H, inter) + allgather_time(H*B, s, intra).
    With s = 1 both are the flat ring over `inter`; with H = 1 the flat ring over `intra`.
    """
    c = get_cluster(cluster)
    b = _check_finite("nbytes", nbytes)
    hosts, s = c.hosts(replicas), c.per_host
    if collective == "allreduce":
        return allreduce_time(b, s, c.intra) + allreduce_time(b, hosts, c.inter)
    if collective == "allgather":
        return allgather_time(s * b, hosts, c.inter) + allgather_time(hosts * b, s, c.intra)
    raise ValueError(f"collective must be one of {COLLECTIVES}, got {collective!r}")


@dataclasses.dataclass(frozen=True)
class GroupLevel:
    """Where a two-level strategy's group collectives run on the projected cluster:
    `size` contiguous replicas per group, all-reduced over `network`, a barrier for the
    group's members only; `note` says how the strategy's groups were mapped."""

    size: int
    network: Network
    note: str


def group_level(cluster: Cluster, replicas: int, groups: int | None) -> GroupLevel | None:
    """The group level of `groups` strategy groups (Timing.groups) on `cluster`.

    Two-level cluster: a group lies inside one host. Groups that fit a host (their size
    divides the host's) are kept; others (e.g. groups=2 simulated on one process, projected
    onto hosts of 8) are projected as the hosts themselves, and the note says so. Single
    network (every replica its own host): the strategy's groups over that network.
    None: no groups known (records with group-level syncs are then an error).
    """
    n = _check_replicas(replicas)
    if groups is not None and (isinstance(groups, bool) or not isinstance(groups, (int, np.integer))
                               or groups < 1 or n % groups):
        raise ValueError(f"groups must be an integer >= 1 that divides the replicas ({n}), got {groups!r}")
    size = None if groups is None else n // int(groups)
    if not cluster.two_level:
        if size is None:
            return None
        return GroupLevel(size, cluster.inter, f"{groups} groups of {size} replicas over {cluster.inter.name}")
    per = cluster.per_host
    if size is not None and per % size == 0:
        where = "one group per host" if size == per else f"{per // size} groups per host"
        return GroupLevel(size, cluster.intra, f"groups of {size} replicas, {where}, over {cluster.intra.name}")
    said = "" if size is None else (f"the strategy's {groups} groups of {size} replicas do not fit in a host "
                                    f"of {per}: ")
    return GroupLevel(per, cluster.intra, f"{said}group level projected within one host "
                                          f"(groups = hosts of {per}), over {cluster.intra.name}")


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
    whose group-level collectives are barriers for their group's members only.
    """

    def __init__(self, network, replicas: int, total_steps: int, stragglers=None, seed: int = 0, *,
                 collective: str = "allreduce", background: str = "async", staleness: int | None = None,
                 groups: int | None = None, state: dict | None = None):
        self.n = _check_replicas(replicas)
        self.cluster = get_cluster(network)
        self.cluster.hosts(self.n)   # the replicas fill whole hosts
        self.net = self.cluster.inter
        self.groups = group_level(self.cluster, self.n, groups)
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
    collective / background / staleness / groups: the strategy's `Timing` (the sync
        collective of records without a `collective` key, how local steps that still move
        a payload are charged (see the module docstring), the replica groups of a
        two-level strategy).

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
                     staleness=staleness, groups=groups)
    cumulative = np.array([proj.advance(i, s.synced, s.payload, s.vote, float(compute[i]), s.collective,
                                        group_payload=s.group_payload, group_synced=s.group_synced)
                           for i, s in enumerate(steps)])
    return cumulative, proj.summary()
