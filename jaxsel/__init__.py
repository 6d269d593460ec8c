"""jaxsel: semi-synchronous data-parallel training (SelSync and its rivals) in JAX."""
from . import aggregate, triggers
from .parallel import data_mesh, global_batch, request_cpu_devices
from .state import TrainState, consensus, consensus_model_state, divergence, init_state
from .step import grad_norm_sum, make_train_step
from .strategies import (
    ASP,
    BSP,
    SSDSGD,
    SSP,
    DiLoCo,
    FedAvg,
    LocalSGD,
    NonReplicatedDecisionError,
    PostLocalSGD,
    SelSync,
    Strategy,
    StepContext,
    Superstep,
    SyncSwitch,
    TriggeredStrategy,
    feed_step_times,
    search_bsp_fraction,
)

__version__ = "0.1.0"
