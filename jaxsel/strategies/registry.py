"""Strategies by name, for the command line and experiment configs.

Options are checked against each strategy's dataclass fields (`jaxsel.core.options`): an
unknown or inapplicable option is an error naming the valid ones. Options spelled
`PREFIX.FIELD` go to what a strategy's `PREFIX_options` field configures: the trigger of
the generic `triggered` strategy (`trigger.FIELD`), the levels of `hierarchical`
(`inner.FIELD`, `outer.FIELD`, built by name with the run's facts like any strategy).
"""
from __future__ import annotations

from typing import Any

from ..core.aggregate import get_aggregator
from ..core.options import OptionError, build, option_defaults, option_names
from ..core.sync import Strategy
from .bsp import BSP
from .diloco import DiLoCo
from .hierarchical import Hierarchical
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
    "hierarchical": Hierarchical,     # one strategy within groups of replicas, another across all
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
    (`replicas`, `total_steps`, `steps_per_epoch`, `base_lr`, `seed`) that a strategy takes only
    where it declares them in `context_fields` and the user set nothing."""
    if name not in STRATEGIES:
        raise OptionError(f"unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}")
    cls = STRATEGIES[name]
    options = _nested(cls, name, dict(options or {}))
    for level in getattr(cls, "levels", ()):   # strategies inside a strategy get the run's facts too
        spec = options.get(level) or option_defaults(cls).get(level)
        if isinstance(spec, str) and spec in STRATEGIES:
            try:
                options[level] = build_strategy(spec, options.pop(f"{level}_options", None), **context)
            except OptionError as err:
                raise OptionError(f"strategy {name!r} {level}: {err}") from None
    try:
        strategy = build(cls, options, kind="strategy", name=name, context=context)
        if context.get("replicas"):
            _check_replicas(strategy, int(context["replicas"]))
        return strategy
    except OptionError:
        raise
    except ValueError as err:
        raise OptionError(f"strategy {name!r}: {err}") from None


def _check_replicas(strategy: Strategy, n: int) -> None:
    """What only the run's replica count can rule out: a strategy's groups, an aggregator
    that needs more replicas ('trimmed:4' of 8 leaves none)."""
    if hasattr(strategy, "check_replicas"):
        strategy.check_replicas(n)
    spec = getattr(strategy, "aggregator", None)
    if spec is not None and not getattr(strategy, "levels", ()):   # a level's aggregator sees its group
        get_aggregator(spec).check_replicas(n)


def _nested_takers() -> str:
    """"triggered (trigger.FIELD), hierarchical (inner.FIELD, outer.FIELD)"."""
    def prefixes(cls):
        return [f"{k[:-len('_options')]}.FIELD" for k in option_names(cls) if k.endswith("_options")]
    return ", ".join(f"{n} ({', '.join(prefixes(c))})" for n, c in STRATEGIES.items() if prefixes(c))


def _nested(cls, name: str, options: dict) -> dict:
    """`PREFIX.FIELD` options moved into the `PREFIX_options` dict option."""
    out = {k: v for k, v in options.items() if "." not in k}
    nested = [k for k in options if "." in k]
    wrong = [k for k in nested if f"{k.split('.', 1)[0]}_options" not in option_names(cls)]
    if wrong:
        raise OptionError(f"strategy {name!r} has no option {', '.join(map(repr, wrong))}; nested options "
                          f"go to {_nested_takers()}")
    for key in nested:
        prefix, field = key.split(".", 1)
        out[f"{prefix}_options"] = {**out.get(f"{prefix}_options", {}), field: options[key]}
    return out
