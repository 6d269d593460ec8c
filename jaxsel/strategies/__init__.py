"""One module per method; each is a trigger x what-is-synced x aggregator."""
from .base import NonReplicatedDecisionError, Strategy, StepContext, TriggeredStrategy
from .bsp import BSP
from .diloco import DiLoCo
from .localsgd import FedAvg, LocalSGD
from .postlocal import PostLocalSGD
from .selsync import SelSync
from .ssdsgd import SSDSGD
from .ssp import ASP, SSP
from .superstep import Superstep
from .syncswitch import SyncSwitch, feed_step_times
from .syncswitch_search import FractionSearch, search_bsp_fraction
