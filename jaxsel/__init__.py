"""jaxsel: semi-synchronous data-parallel training (SelSync and its rivals) in JAX.

The public API is `__all__` below: each name is imported from its module on first use
(PEP 562), not with the package, because the `jaxsel` command must install its Ctrl-C
handler before JAX is imported (`jaxsel.training.early_stop`) and `import jaxsel.cli`
imports this package first. Behind these names, packages in layers that import only
downwards (tests/test_layers.py): core; strategies, models, data; costmodel; training;
analysis; cli. Each package's docstring says what it holds.
"""
from __future__ import annotations

import importlib

#: typing's constant, without importing typing (10 ms at start-up, before the `jaxsel`
#: command's Ctrl-C handler is installed: tests/test_faults.py's early Ctrl-C)
TYPE_CHECKING = False

__version__ = "0.1.0"

#: public name -> the module that defines it
_EXPORTS = {
    "register_aggregator": "core.aggregate",
    **dict.fromkeys(("Layout", "choose_layout", "data_mesh", "describe_layout", "global_batch",
                     "request_cpu_devices"), "core.parallel"),
    **dict.fromkeys(("TrainState", "consensus", "consensus_model_state", "divergence", "init_state",
                     "num_replicas"), "core.state"),
    "pace": "core.pacing",
    "replica_correlation": "core.correlation",
    **dict.fromkeys(("grad_norm_sum", "make_train_step"), "core.step"),
    **dict.fromkeys(("NonReplicatedDecisionError", "StepContext", "StepStats", "Strategy",
                     "SyncReport", "sync_where"), "core.sync"),
    **dict.fromkeys(("SyncState", "as_optax", "sync_facts", "sync_model_state"), "core.transformation"),
    "register_trigger": "core.triggers",
    **dict.fromkeys(("ASP", "Accordion", "BSP", "DeMo", "SSDSGD", "SSP", "DiLoCo", "FedAvg", "Hierarchical",
                     "IslandAveraging", "LocalSGD", "Phases", "PostLocalSGD", "SPARTA", "SelSync", "StreamingDiLoCo",
                     "Superstep", "SyncSwitch", "Triggered", "TriggeredStrategy", "build_strategy", "feed_step_times",
                     "method_traits", "register_strategy"), "strategies"),
    "TrainConfig": "training.config",
    "train": "training.train",
    "search_bsp_fraction": "analysis.syncswitch_search",
}
#: the device core's modules an extension author uses, reachable as attributes of the
#: package (`jaxsel.triggers.Trigger`, `jaxsel.collectives.replica_mean`, `jaxsel.sync.SYNC_SCOPE`)
_SUBMODULES = {name: f"core.{name}" for name in ("aggregate", "collectives", "sync", "triggers")}

__all__ = sorted([*_EXPORTS, *_SUBMODULES])


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        value = importlib.import_module(f".{_SUBMODULES[name]}", __name__)
    elif name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:   # what static tools see; at run time the names arrive through __getattr__
    from typing import Any

    from .analysis.syncswitch_search import search_bsp_fraction  # noqa: F401
    from .core import aggregate, collectives, sync, triggers  # noqa: F401
    from .core.aggregate import register_aggregator  # noqa: F401
    from .core.correlation import replica_correlation  # noqa: F401
    from .core.pacing import pace  # noqa: F401
    from .core.parallel import (Layout, choose_layout, data_mesh, describe_layout, global_batch,  # noqa: F401
                                request_cpu_devices)
    from .core.state import (TrainState, consensus, consensus_model_state, divergence, init_state,  # noqa: F401
                             num_replicas)
    from .core.step import grad_norm_sum, make_train_step  # noqa: F401
    from .core.sync import (NonReplicatedDecisionError, StepContext, StepStats,  # noqa: F401
                            Strategy, SyncReport, sync_where)
    from .core.transformation import SyncState, as_optax, sync_facts, sync_model_state  # noqa: F401
    from .core.triggers import register_trigger  # noqa: F401
    from .strategies import (ASP, BSP, SPARTA, Accordion, DeMo, SSDSGD, SSP, DiLoCo, FedAvg,  # noqa: F401
                             Hierarchical, IslandAveraging, LocalSGD, Phases, PostLocalSGD, SelSync, StreamingDiLoCo,
                             Superstep, SyncSwitch, Triggered, TriggeredStrategy, build_strategy, feed_step_times,
                             method_traits, register_strategy)
    from .training.config import TrainConfig  # noqa: F401
    from .training.train import train  # noqa: F401
