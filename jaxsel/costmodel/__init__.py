"""The cost model: projected wall-clock time on clusters we do not have (pure Python/NumPy).

`networks`: networks, two-level clusters and the time of their collectives; `stragglers`
(`jaxsel.core.stragglers`, shared with Sync-Switch's simulated step times): per-replica
slowdown factors; `projector`: a logged run's steps charged on a network with
stragglers (`Projector`, the training loop's live estimate; `project_run`, after the fact);
`timing`: a strategy's `Timing` (the Projector's settings), derived from what it declares.
Sits between the strategies and the training run; the names below are its interface.
"""
from ..core import stragglers
from .networks import (COLLECTIVES, NETWORKS, Cluster, GroupLevel, Network, allgather_time, allreduce_time,
                       cluster_collective_time, collective_time, get_cluster, get_network, group_level, vote_time)
from .projector import BACKGROUND_MODES, Projector, StepRecord, parameter_server_time, project_run, step_records
from .timing import Timing, strategy_timing

__all__ = ["BACKGROUND_MODES", "COLLECTIVES", "NETWORKS", "Cluster", "GroupLevel", "Network", "Projector", "StepRecord",
           "Timing", "allgather_time", "allreduce_time", "cluster_collective_time", "collective_time", "get_cluster",
           "get_network", "group_level", "parameter_server_time", "project_run", "step_records", "strategy_timing", "stragglers", "vote_time"]
