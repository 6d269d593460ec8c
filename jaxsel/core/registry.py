"""Names for what a user chooses by name: strategies, triggers, aggregators.

A `Registry` maps names to classes (frozen dataclasses whose fields are their options).
Each kind's registry lives beside its base class (`sync.STRATEGIES`, `triggers.TRIGGERS`,
`aggregate.AGGREGATORS`), and every class registers itself where it is defined
(`@STRATEGIES.register("bsp")`), a user's too (`jaxsel.register_strategy`, `--plugin`).
So the registry is a leaf: it imports nothing of jaxsel's, nothing imports back into a
strategy to find another by name, and there is no import cycle. Building by name (options
checked and coerced) is `jaxsel.strategies.build_strategy`, `triggers.get_trigger` and
`aggregate.get_aggregator`. Names are listed alphabetically (help texts, errors).
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Iterator, Mapping, TypeVar, overload

T = TypeVar("T", bound=type)


class Registry(Mapping[str, type]):
    """name -> class for one kind ("strategy", "trigger", "aggregator") of `base` classes."""

    def __init__(self, kind: str, base: type, base_path: str):
        self.kind, self.base, self.base_path = kind, base, base_path
        self._classes: dict[str, type] = {}

    @overload
    def register(self, name: str) -> Callable[[T], T]: ...
    @overload
    def register(self, name: str, cls: T) -> T: ...

    def register(self, name: str, cls: T | None = None) -> T | Callable[[T], T]:
        """Make `cls` reachable by `name`: `register(name, cls)`, or `@register(name)` on
        the class (above its `@dataclasses.dataclass`). `cls` must be a dataclass
        subclass of the base; registering a name again replaces its class."""
        if cls is None:
            return lambda c: self.register(name, c)
        if not (isinstance(cls, type) and issubclass(cls, self.base) and dataclasses.is_dataclass(cls)):
            raise TypeError(f"register_{self.kind}({name!r}, ...) needs a dataclass subclass of {self.base_path}")
        self._classes[name] = cls
        return cls

    def unknown(self, name) -> str:
        """The one-line error for a name nobody registered."""
        return f"unknown {self.kind} {name!r}; choose one of {', '.join(self)}"

    def __getitem__(self, name: str) -> type:
        return self._classes[name]

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._classes))

    def __len__(self) -> int:
        return len(self._classes)

    def __repr__(self) -> str:
        return f"Registry({self.kind}: {', '.join(self)})"
