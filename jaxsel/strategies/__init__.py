"""One module per method; each is a trigger x what-is-synced x aggregator."""
from .base import NonReplicatedDecisionError, Strategy, StepContext, TriggeredStrategy
from .bsp import BSP
from .localsgd import FedAvg, LocalSGD
from .selsync import SelSync
