"""The strategies as a user reads them: each one's summary and options (`jaxsel strategies`).

Generated from the declarations, never written twice: an option's name, type and default
come from the strategy's dataclass field, its meaning from the string under the field
(`core.options.option_docs`; the payload's options are declared once, in payload.py) or,
for an option many strategies declare alike (the run facts in `context_fields`), from
`SHARED` below, which also gives a plugin's own `aggregator` field the payload's meaning.
The values an aggregator or a trigger may take are the registries' names.
"""
from __future__ import annotations

import inspect
from typing import Any, NamedTuple

from ..core.options import allowed_types, option_defaults, option_docs, option_names, type_hints
from ..core.sync import STRATEGIES
from .payload import GradientPayload

#: meanings of the options several strategies declare alike
SHARED = {
    **option_docs(GradientPayload),
    "sync_opt_state": "also average the optimizer's state at a sync",
    "opt_state_period": "average the optimizer's state on a period of its own (DES-LOC); none: it stays local",
    "total_steps": "the run's length in steps",
    "steps_per_epoch": "steps in one epoch of a replica's shard",
    "seed": "seed of the method's own random draws",
}
#: the run facts a strategy takes where the user set none (`context_fields`), as the run names them
RUN_FACTS = {"total_steps": "--steps", "steps_per_epoch": "the data", "seed": "--seed", "lr": "--lr",
             "weight_decay": "--weight-decay", "replicas": "--replicas"}


class OptionInfo(NamedTuple):
    """One option as `jaxsel strategies NAME` lists it."""

    name: str
    kind: str       # "float", "int or none", "true/false", "text", ...
    default: Any
    meaning: str


def summary(name: str) -> str:
    """The strategy's first sentence: its module's docstring where the module holds this
    strategy alone (one concept per file), else its class's."""
    cls = STRATEGIES[name]
    module = inspect.getmodule(cls)
    alone = [c for c in STRATEGIES.values() if inspect.getmodule(c) is module] == [cls]
    doc = " ".join(((module.__doc__ if alone else None) or inspect.getdoc(cls) or name).split())
    end = doc.find(". ")
    return doc if end < 0 else doc[:end + 1]


def description(name: str) -> str:
    """The strategy's whole class docstring, paragraphs kept."""
    return inspect.getdoc(STRATEGIES[name]) or summary(name)


def options(name: str) -> list[OptionInfo]:
    """Strategy `name`'s options in declaration order, with types, defaults and meanings."""
    cls = STRATEGIES[name]
    hints, defaults, docs = type_hints(cls), option_defaults(cls), option_docs(cls)
    facts = set(cls.context_fields)
    out = []
    for option in option_names(cls):
        meaning = docs.get(option) or SHARED.get(option, "")
        if option in facts:
            meaning += f" (unset: the run's {RUN_FACTS.get(option, option)})"
        allowed = _registered(option)
        if allowed:
            meaning += f": {allowed}"
        out.append(OptionInfo(option, kind_of(hints.get(option, Any)), defaults.get(option), meaning))
    return out


def aliases(name: str) -> dict[str, str]:
    """The last release's names of strategy `name`'s options, old -> new, still read for one
    release (e.g. DiLoCo's `inner_steps`, now `period`)."""
    return dict(STRATEGIES[name].aliases)


def kind_of(hint) -> str:
    """A field's type in words."""
    if hint is dict:
        return "table"
    plain, nullable = allowed_types(hint)
    words = {bool: "true/false", int: "int", float: "float", str: "text"}
    text = " or ".join(words[t] for t in plain) or "name"
    return f"{text} or none" if nullable else text


def _registered(option: str) -> str:
    """The names an option that picks a registered kind may take."""
    if option == "aggregator":
        from ..core.aggregate import AGGREGATORS

        return ", ".join(AGGREGATORS) + " (trimmed:K, krum:F, ...: a count after the colon)"
    if option == "trigger":
        from ..core.triggers import TRIGGERS

        return ", ".join(TRIGGERS)
    return ""
