"""What the layers above the strategies know of a method, declared beside it.

The core protocol (`core.sync.Strategy`) is what a replica's step needs. Other layers
want a few facts of their own about a method, and those are not the step's business:
- the frontier (`analysis/frontier*.py`, `jaxsel frontier`): `budget`, the options that set
  how much the method communicates and the points it sweeps them over (`core.budget`);
  None leaves the method out of a frontier unless the user gives its points;
- the cost model (`costmodel/timing.py`): `background`, how a sync nobody waits on
  (`blocking=False`) is carried out: "async", a parameter server's push and pull on the
  replica's own clock (SSP), or "overlapped", behind the next step's compute (SSD-SGD);
- the run's warning for a periodic sync that falls after the run
  (`training/sync_horizon.py`): `unsynced`, what never synchronizing means beyond "the
  replicas train alone";
- `jaxsel compare --match-budget` and the frontier's own-budget table
  (`analysis/matched_budget.py`): `adaptive`, whether the steps that synchronize are decided
  during the run (by the data, by step times) rather than fixed in advance by the step
  count; a bool, or a function of the built strategy where its options decide.

A strategy declares what differs from the defaults with `@method_traits(...)` on its
class, in its own file, so adding a method is still one file; `traits_of` reads them and
`is_adaptive` evaluates `adaptive` on a built strategy. A class inherits its bases'
declarations field by field, the nearest class in its MRO that declares a field winning,
as it inherited the class attributes these were before: a subclass, a mixin (DiLoCo's
`OuterLoop`), a user's plugin get what their bases say. They are kept in a table keyed by
the class, not on it, so `Strategy` knows nothing of them.

Last release declared them as class attributes of the strategy (`budget = ...`,
`background = ...`, `unsynced = ...`) and an `adaptive_sync()` method. A user's strategy
that still does is read as before for one release, with a DeprecationWarning naming
`@jaxsel.method_traits(...)` (a `TraitOnClassWarning`; the command line prints it once
as a note); and a read of them as last release read them (`LocalSGD.budget`,
`strategy.adaptive_sync()`) answers from the traits with a DeprecationWarning naming
`traits_of` (through `core.sync.MOVED_ATTRIBUTES`, which knows none of their names).
"""
from __future__ import annotations

import dataclasses
import warnings
import weakref
from typing import Any, Callable, TypeVar, Union

from ..core.budget import Budget
from ..compat.notes import NotedDeprecation
from ..core.sync import MOVED_ATTRIBUTES


class TraitOnClassWarning(NotedDeprecation):
    """A strategy declares a trait as last release did, on its class (`LEGACY_NAMES`)."""


@dataclasses.dataclass(frozen=True)
class MethodTraits:
    """A method's facts for the frontier (`budget`), the cost model (`background`), the
    run's never-syncs warning (`unsynced`) and the budget-matched comparison (`adaptive`);
    see the module docstring. The defaults are a method's that declares nothing."""

    budget: Budget | None = None
    background: str = "async"
    unsynced: str = "its periodic averaging never happens"
    adaptive: Union[bool, Callable[[Any], bool]] = False


FIELDS = tuple(f.name for f in dataclasses.fields(MethodTraits))
#: last release's class attribute of each field, still read for one release
LEGACY_NAMES = {"budget": "budget", "background": "background", "unsynced": "unsynced",
                "adaptive": "adaptive_sync"}
#: class -> the fields it declares itself (not its bases'), by `method_traits`
_DECLARED: "weakref.WeakKeyDictionary[type, dict[str, Any]]" = weakref.WeakKeyDictionary()

T = TypeVar("T", bound=type)


def method_traits(**fields) -> Callable[[T], T]:
    """Class decorator: declare the class's traits that differ from its bases' (or from the
    defaults). A name that is not a field is a one-line TypeError naming the fields."""
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        raise TypeError(f"method_traits: unknown trait(s) {', '.join(unknown)}; the traits are {', '.join(FIELDS)}")
    if "budget" in fields and not (fields["budget"] is None or isinstance(fields["budget"], Budget)):
        raise TypeError(f"method_traits: budget must be a core.budget.Budget (e.g. sweep('period', 4, 8)) or None, "
                        f"got {fields['budget']!r}")

    def declare(cls: T) -> T:
        _DECLARED[cls] = {**_DECLARED.get(cls, {}), **fields}
        return cls

    return declare


def traits_of(strategy) -> MethodTraits:
    """The traits of a strategy class or of a built strategy, each field from the nearest
    class in its MRO that declares it (see the module docstring), else the default."""
    cls = strategy if isinstance(strategy, type) else type(strategy)
    found = {}
    for name in FIELDS:
        for klass in cls.__mro__:
            if name in _DECLARED.get(klass, {}):
                found[name] = _DECLARED[klass][name]
                break
            if _legacy(klass, name):
                found[name] = _legacy_value(klass, name)
                break
    return MethodTraits(**found)


def is_adaptive(strategy) -> bool:
    """Whether the built `strategy` decides during the run which steps synchronize."""
    adaptive = traits_of(strategy).adaptive
    return bool(adaptive(strategy) if callable(adaptive) else adaptive)


def _legacy(klass: type, name: str) -> bool:
    """Whether `klass` itself sets last release's attribute of trait `name` (an option of
    the same name, a dataclass field, is not one)."""
    old = LEGACY_NAMES[name]
    if old not in vars(klass):
        return False
    return not (dataclasses.is_dataclass(klass) and old in {f.name for f in dataclasses.fields(klass)})


def _legacy_value(klass: type, name: str):
    old = LEGACY_NAMES[name]
    new = "adaptive=lambda strategy: ..." if name == "adaptive" else f"{name}=..."
    warnings.warn(f"{klass.__qualname__}.{old}: declaring a strategy's {old} on its class is deprecated and read "
                  f"for one release; declare it beside the class with @jaxsel.method_traits({new})",
                  TraitOnClassWarning, stacklevel=4)
    value = vars(klass)[old]
    return (lambda strategy: value(strategy)) if name == "adaptive" else value


def _read_moved(name: str):
    """The reader of last release's attribute `LEGACY_NAMES[name]` of a strategy class or a
    strategy (`core.sync.MOVED_ATTRIBUTES`): its trait, with a DeprecationWarning naming
    where it is read now. `adaptive_sync` was a method: a strategy's reads as one, a
    class's as the function of a strategy it was."""
    old = LEGACY_NAMES[name]

    def read(owner):
        warnings.warn(f"{old} of a strategy is read from its traits for one release; read "
                      f"jaxsel.strategies.traits_of(strategy).{name}" +
                      (" or jaxsel.strategies.is_adaptive(strategy)" if name == "adaptive" else ""),
                      DeprecationWarning, stacklevel=4)
        if name != "adaptive":
            return getattr(traits_of(owner), name)
        return is_adaptive if isinstance(owner, type) else (lambda: is_adaptive(owner))

    return read


MOVED_ATTRIBUTES.update({old: _read_moved(name) for name, old in LEGACY_NAMES.items()})
