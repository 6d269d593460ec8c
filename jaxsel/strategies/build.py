"""Strategies by name, for the command line and experiment configs.

Every strategy registers itself in `STRATEGIES` (`core.sync`, a `core.registry.Registry`)
where it is defined; importing this package imports them all. Options are checked against
each strategy's dataclass fields (`jaxsel.core.options`): an unknown or inapplicable option
is an error naming the valid ones. Options spelled `PREFIX.FIELD` go to what a strategy's
`PREFIX_options` field configures: the trigger of the generic `triggered` strategy
(`trigger.FIELD`), the levels of `hierarchical` (`inner.FIELD`, `outer.FIELD`). A level
named by a string is built here, by `build_level`, with the run's facts like any strategy.
"""
from __future__ import annotations

from typing import Any, Callable, TypeVar, overload

from ..compat.renamed_options import read_renamed
from ..core.options import OptionError, accepts, build, option_defaults, option_names
from ..core.sync import STRATEGIES, Strategy
from .triggered import Triggered

T = TypeVar("T", bound=type)


@overload
def register_strategy(name: str) -> Callable[[T], T]: ...
@overload
def register_strategy(name: str, cls: T) -> T: ...


def register_strategy(name: str, cls: type | None = None):
    """Make a user-defined strategy reachable by name (`jaxsel train --strategy NAME`,
    experiment configs): `register_strategy(name, cls)` or `@register_strategy(name)`.
    `cls` is a frozen dataclass subclassing jaxsel.Strategy whose fields are its options;
    it synchronizes through `ctx.sync` (`jaxsel.sync.sync_where`). A class that declares no
    `name` of its own is called by the name it is registered under (its `describe()`)."""
    if cls is None:
        return lambda c: register_strategy(name, c)
    STRATEGIES.register(name, cls)
    if "name" not in vars(cls):
        cls.name = name
    return cls


def strategy_options(name: str) -> dict[str, Any]:
    """Strategy `name`'s options and their defaults (for help texts and configs)."""
    return option_defaults(STRATEGIES[name])


def build_strategy(name: str, options: dict[str, Any] | None = None, **context) -> Strategy:
    """Build strategy `name` from user `options` (None values mean "default"); an unknown
    option is an OptionError naming the valid ones. `context` carries run facts
    (`replicas`, `total_steps`, `steps_per_epoch`, `seed`, `lr`, `weight_decay`) that a strategy takes only
    where it declares them in `context_fields` and the user set nothing."""
    if name not in STRATEGIES:
        raise OptionError(STRATEGIES.unknown(name))
    cls = STRATEGIES[name]
    options = read_renamed(cls, {k: v for k, v in (options or {}).items() if v is not None}, kind="strategy",
                           name=name)
    options = _nested(cls, name, options)
    for level in cls.levels:   # strategies inside a strategy get the run's facts too
        spec = options.get(level) or option_defaults(cls).get(level)
        try:
            options[level] = build_level(level, spec, options.pop(f"{level}_options", None), context)
        except OptionError as err:
            raise OptionError(f"strategy {name!r} {level}: {err}") from None
        except ValueError as err:
            raise OptionError(f"strategy {name!r}: {err}") from None
    try:
        strategy = build(cls, options, kind="strategy", name=name, context=context)
        if context.get("replicas"):
            strategy.check_replicas(int(context["replicas"]))
        return strategy
    except OptionError:
        raise
    except ValueError as err:
        raise OptionError(f"strategy {name!r}: {err}") from None


def is_level_strategy(strategy) -> bool:
    """A plain trigger x sync mode x aggregator strategy (its step is `Triggered.apply`)."""
    return isinstance(strategy, Triggered) and type(strategy).apply is Triggered.apply


def level_names() -> list[str]:
    """The registered strategies a level of a two-level strategy may be."""
    return [name for name, cls in STRATEGIES.items() if issubclass(cls, Triggered) and cls.apply is Triggered.apply
            and cls.composable]


def build_level(level: str, spec, options: dict | None = None, context: dict | None = None):
    """A level of a two-level strategy (`Hierarchical.inner`, `.outer`): a registered
    trigger-based strategy built by name with its `options` and the run's facts, or a
    built one as it is. ValueError for anything else."""
    if isinstance(spec, str):
        if spec not in STRATEGIES:
            raise ValueError(f"{level}={spec!r} is not a trigger-based strategy; choose one of "
                             f"{', '.join(level_names())}")
        spec = build_strategy(spec, options, **(context or {}))
    elif options:
        raise ValueError(f"{level}_options {sorted(options)} given with a built {level} strategy")
    if not is_level_strategy(spec):
        raise ValueError(f"{level} must be a trigger-based strategy ({', '.join(level_names())}), "
                         f"got {getattr(spec, 'name', type(spec).__name__)}")
    return spec


def options_for(name: str, options: dict) -> dict:
    """The subset of `options` strategy `name` takes (a comparison runs several strategies)."""
    cls = STRATEGIES[name]
    return {k: v for k, v in options.items() if takes(cls, k)}


def takes(cls, key: str) -> bool:
    """Whether strategy class `cls` takes option `key` (PREFIX.FIELD: through its PREFIX_options)."""
    prefix, dot, _ = key.partition(".")
    return accepts(cls, f"{prefix}_options") if dot else accepts(cls, key)


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
