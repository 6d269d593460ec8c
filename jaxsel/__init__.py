"""jaxsel: semi-synchronous data-parallel training (SelSync and its rivals) in JAX.

The public names below are imported on first use (PEP 562), not with the package: the
`jaxsel` command must install its Ctrl-C handler before JAX is imported (early_stop.py),
and `import jaxsel.cli` would otherwise import JAX first.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name -> the module of the package that defines it
_EXPORTS = {
    "register_aggregator": "aggregate",
    **dict.fromkeys(("ReplicaMesh", "data_mesh", "describe_layout", "global_batch", "num_replicas",
                     "request_cpu_devices"), "parallel"),
    **dict.fromkeys(("TrainState", "consensus", "consensus_model_state", "divergence", "init_state"), "state"),
    **dict.fromkeys(("grad_norm_sum", "make_train_step"), "step"),
    **dict.fromkeys(("ASP", "BSP", "SSDSGD", "SSP", "DiLoCo", "FedAvg", "Hierarchical", "LocalSGD",
                     "PostLocalSGD", "SelSync", "StreamingDiLoCo", "Superstep", "SyncSwitch", "Triggered",
                     "TriggeredStrategy", "build_strategy", "feed_step_times", "register_strategy",
                     "search_bsp_fraction"), "strategies"),
    **dict.fromkeys(("NonReplicatedDecisionError", "StepContext", "StepResult", "StepStats", "Strategy",
                     "SyncReport", "sync_where"), "sync"),
    "register_trigger": "triggers",
}
#: submodules reachable as attributes of the package (`jaxsel.sync.SYNC_SCOPE`)
_SUBMODULES = ("aggregate", "collectives", "sync", "triggers")

__all__ = sorted([*_EXPORTS, *_SUBMODULES])


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:   # what static tools see; at run time the names arrive through __getattr__
    from . import aggregate, collectives, sync, triggers  # noqa: F401
    from .aggregate import register_aggregator  # noqa: F401
    from .parallel import (ReplicaMesh, data_mesh, describe_layout, global_batch,  # noqa: F401
                           num_replicas, request_cpu_devices)
    from .state import TrainState, consensus, consensus_model_state, divergence, init_state  # noqa: F401
    from .step import grad_norm_sum, make_train_step  # noqa: F401
    from .strategies import (ASP, BSP, SSDSGD, SSP, DiLoCo, FedAvg, Hierarchical, LocalSGD,  # noqa: F401
                             PostLocalSGD, SelSync, StreamingDiLoCo, Superstep, SyncSwitch, Triggered,
                             TriggeredStrategy, build_strategy, feed_step_times, register_strategy,
                             search_bsp_fraction)
    from .sync import (NonReplicatedDecisionError, StepContext, StepResult, StepStats,  # noqa: F401
                       Strategy, SyncReport, sync_where)
    from .triggers import register_trigger  # noqa: F401
