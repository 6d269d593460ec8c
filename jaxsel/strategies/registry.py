"""Strategies by name, for the command line and experiment configs.

Options are checked against each strategy's dataclass fields (`jaxsel.options`): an
unknown or inapplicable option is an error naming the valid ones. Options spelled
`trigger.FIELD` go to the trigger of the generic `triggered` strategy.
"""
from __future__ import annotations

from typing import Any

from ..options import OptionError, build, option_defaults, option_names
from ..sync import Strategy
from .bsp import BSP
from .diloco import DiLoCo
from .localsgd import FedAvg, LocalSGD
from .postlocal import PostLocalSGD
from .selsync import SelSync
from .ssdsgd import SSDSGD
from .ssp import ASP, SSP
from .streaming_diloco import StreamingDiLoCo
from .superstep import Superstep
from .syncswitch import SyncSwitch
from .triggered import TriggeredStrategy

STRATEGIES: dict[str, type] = {
    "bsp": BSP,
    "localsgd": LocalSGD,
    "fedavg": FedAvg,
    "selsync": SelSync,
    "ssp": SSP,            # emulated staleness
    "asp": ASP,            # emulated, s = N - 1
    "syncswitch": SyncSwitch,
    "ssdsgd": SSDSGD,
    "postlocal": PostLocalSGD,
    "diloco": DiLoCo,
    "streamingdiloco": StreamingDiLoCo,   # fragments synchronized at staggered steps
    "superstep": Superstep,
    "triggered": TriggeredStrategy,   # any registered trigger x any aggregator
}


def register_strategy(name: str, cls: type) -> type:
    """Make a user-defined strategy reachable by name (`jaxsel train --strategy NAME`,
    experiment configs). `cls` is a frozen dataclass subclassing jaxsel.Strategy whose
    fields are its options; it synchronizes through `jaxsel.sync.sync_where`."""
    import dataclasses

    if not (isinstance(cls, type) and issubclass(cls, Strategy) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"register_strategy({name!r}, ...) needs a dataclass subclass of jaxsel.Strategy")
    STRATEGIES[name] = cls
    return cls


def strategy_options(name: str) -> dict[str, Any]:
    """Strategy `name`'s options and their defaults (for help texts and configs)."""
    return option_defaults(STRATEGIES[name])


def build_strategy(name: str, options: dict[str, Any] | None = None, **context) -> Strategy:
    """Build strategy `name` from user `options` (None values mean "default"); an unknown
    option is an OptionError naming the valid ones. `context` carries run facts
    (`replicas`, `total_steps`, `steps_per_epoch`, `base_lr`) that a strategy takes only
    where it declares them in `context_fields` and the user set nothing."""
    if name not in STRATEGIES:
        raise OptionError(f"unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}")
    cls = STRATEGIES[name]
    options = dict(options or {})
    nested = {k.split(".", 1)[1]: options.pop(k) for k in list(options) if k.startswith("trigger.")}
    if nested:
        if "trigger_options" not in option_names(cls):
            raise OptionError(f"strategy {name!r} has no option {', '.join(repr('trigger.' + k) for k in nested)}"
                              f"; only the 'triggered' strategy takes trigger.FIELD options")
        options["trigger_options"] = nested
    try:
        return build(cls, options, kind="strategy", name=name, context=context)
    except OptionError:
        raise
    except ValueError as err:
        raise OptionError(f"strategy {name!r}: {err}") from None
