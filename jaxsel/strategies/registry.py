"""Strategies by name, for the command line and experiment configs."""
from __future__ import annotations

import inspect
from typing import Any, Callable

from .base import Strategy
from .bsp import BSP
from .diloco import DiLoCo
from .localsgd import FedAvg, LocalSGD
from .postlocal import PostLocalSGD
from .selsync import SelSync
from .ssdsgd import SSDSGD
from .ssp import ASP, SSP
from .superstep import Superstep
from .syncswitch import SyncSwitch

STRATEGIES: dict[str, Callable[..., Strategy]] = {
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
    "superstep": Superstep,
}


def build_strategy(name: str, options: dict[str, Any] | None = None, **context) -> Strategy:
    """Build strategy `name`, passing each factory only the options it accepts.

    `options` are user settings (None values are skipped, so defaults apply);
    `context` carries run facts some strategies need (e.g. `replicas`, `total_steps`).
    """
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}")
    factory = STRATEGIES[name]
    accepted = inspect.signature(factory).parameters
    kwargs = {k: v for k, v in {**context, **(options or {})}.items() if k in accepted and v is not None}
    return factory(**kwargs)
