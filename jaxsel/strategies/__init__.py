"""One module per method or composition, each on the sync core: trigger x what-is-synced x
aggregator (`triggered`), compositions of those (`phases`, `hierarchical`), and the methods
with a step of their own (DiLoCo, SSP, SSD-SGD, Sync-Switch).

Importing this package registers every built-in strategy by name (`STRATEGIES`);
`build_strategy` builds one from its name and options.
"""
from ..core.sync import STRATEGIES, NonReplicatedDecisionError, StepContext, Strategy
from .accordion import Accordion
from .bsp import BSP
from .build import build_strategy, register_strategy
from .demo import DeMo
from .diloco import DiLoCo
from .hierarchical import Hierarchical
from .islands import IslandAveraging
from .localsgd import FedAvg, LocalSGD
from .phases import Phases
from .postlocal import PostLocalSGD
from .selsync import SelSync
from .sparta import SPARTA
from .ssdsgd import SSDSGD
from .ssp import ASP, SSP
from .streaming_diloco import StreamingDiLoCo
from .superstep import Superstep
from .syncswitch import SyncSwitch, feed_step_times
from .traits import MethodTraits, is_adaptive, method_traits, traits_of
from .triggered import Triggered, TriggeredStrategy
