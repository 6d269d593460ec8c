"""Networks and their collectives: how long an all-reduce or all-gather of B bytes takes
among N replicas over `Network(bandwidth, latency)` (ring algorithms), and over a two-level
`Cluster` (hosts of replicas: NVLink or PCIe inside, Ethernet between). Pure Python/NumPy.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..core.stragglers import check_finite as _check_finite, check_replicas as _check_replicas

COLLECTIVES = ("allreduce", "allgather")


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


def island_level(cluster: Cluster, replicas: int, size: int) -> GroupLevel:
    """Island averaging's group level (Timing.islands): islands of `size` replicas drawn
    afresh at every sync, so an island's members may sit on any hosts: an all-reduce among
    `size` replicas over the inter-host network (on a two-level cluster the slower one; an
    island that happens to lie inside one host would be faster), a barrier for the island
    only. The barrier takes contiguous blocks of `size` replicas, not each sync's draw: the
    same without stragglers; with them, a slow replica holds back a fixed block."""
    n = _check_replicas(replicas)
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 2 or n % size:
        raise ValueError(f"islands must be an integer >= 2 that divides the replicas ({n}), got {size!r}")
    return GroupLevel(int(size), cluster.inter, f"random islands of {size} replicas, a fresh split per sync, "
                                                f"over {cluster.inter.name}")


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
