"""jaxsel: semi-synchronous data-parallel training (SelSync and its rivals) in JAX."""
from . import aggregate, collectives, sync, triggers
from .aggregate import register_aggregator
from .parallel import ReplicaMesh, data_mesh, describe_layout, global_batch, num_replicas, request_cpu_devices
from .state import TrainState, consensus, consensus_model_state, divergence, init_state
from .step import grad_norm_sum, make_train_step
from .strategies import (
    ASP,
    BSP,
    SSDSGD,
    SSP,
    DiLoCo,
    FedAvg,
    Hierarchical,
    LocalSGD,
    PostLocalSGD,
    SelSync,
    StreamingDiLoCo,
    Superstep,
    SyncSwitch,
    Triggered,
    TriggeredStrategy,
    build_strategy,
    feed_step_times,
    register_strategy,
    search_bsp_fraction,
)
from .sync import NonReplicatedDecisionError, StepContext, StepResult, StepStats, Strategy, SyncReport, sync_where
from .triggers import register_trigger

__version__ = "0.1.0"
