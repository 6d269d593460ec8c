"""Strategy options renamed since the last release (issue 44, one name per concept: DiLoCo's
`inner_steps` is `period`), read under their old names until `REMOVED_IN`.

A strategy declares its renames with `@renamed(inner_steps="period")` above its
`@dataclasses.dataclass`: that sets the class's `aliases` (old -> new, which the command
line, config files, `jaxsel strategies NAME` and old records read) and lets Python build it
by the old name, `DiLoCo(inner_steps=8)`, with a `RenamedOptionWarning`. The constructor
stays the dataclass's own: `inspect.signature`, `help()` and editors list the fields with
their defaults (a metaclass that rewrote every strategy's call hid them all behind
`(*args, **kwargs)`). The parsers rename through `read_renamed` before they check names.
"""
from __future__ import annotations

import functools
import warnings
from typing import Any, Callable, Mapping, TypeVar

from ..core.options import OptionError
from .notes import NotedDeprecation

#: the release that no longer reads the old names
REMOVED_IN = "0.2.0"

T = TypeVar("T", bound=type)


class RenamedOptionWarning(NotedDeprecation):
    """An option given by its last release's name; the command line prints each as a note."""


def read_renamed(cls, options: Mapping[str, Any], *, kind: str, name: str, stacklevel: int = 2) -> dict:
    """`options` with every last-release name of an option (`cls.aliases`, old -> new) read
    as the new one, each with a RenamedOptionWarning naming it; both names given at once is
    an OptionError naming both. `stacklevel`: the frame the warning names, counted from the
    caller (2: the caller's caller)."""
    renamed = getattr(cls, "aliases", {})
    out = dict(options)
    for old in [k for k in out if k in renamed]:
        new = renamed[old]
        if new in out:
            raise OptionError(f"{kind} {name!r}: {old}={out[old]!r} and {new}={out[new]!r} both set {new} "
                              f"({old} is its old name); give it once, as {new}")
        out[new] = out.pop(old)
        warnings.warn(f"{kind} {name!r} option {old!r} is now called {new!r}; the old name goes in the next "
                      f"release: write {new}={out[new]!r}", RenamedOptionWarning, stacklevel=stacklevel + 1)
    return out


def renamed(**old_to_new: str) -> Callable[[T], T]:
    """Class decorator, above `@dataclasses.dataclass`: the class's `aliases` (old -> new),
    and its `__init__` taking an old name for the new one with a warning. The wrapper keeps
    the dataclass's `__init__` as `__wrapped__`, so its signature is the one shown."""
    def declare(cls: T) -> T:
        init = cls.__init__

        @functools.wraps(init)
        def __init__(self, *args, **kwargs):
            if kwargs.keys() & old_to_new.keys():
                kwargs = read_renamed(cls, kwargs, kind="strategy", name=cls.name, stacklevel=2)
            init(self, *args, **kwargs)

        cls.aliases = dict(old_to_new)
        cls.__init__ = __init__
        return cls
    return declare
