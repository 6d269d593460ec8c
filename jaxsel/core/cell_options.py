"""A strategy's cell options: the numbers in which cells of one program may differ.

A job's budget points of one method (`localsgd:period=K` for five K, SelSync at five
deltas, spread schedules of other sync counts) run the same step on other numbers, as its
seeds do. A strategy (or a trigger it holds in a field) names such options in its
`cell_options`: numbers its step reads only in arithmetic on the device (a comparison, a
modulus), never in Python control flow, a shape or a host array; a named field that holds
another object with `cell_options` (a `triggered` strategy's trigger) contributes that
object's options ("trigger.syncs"). An option settled from another one (a superstep's
period from its epochs, Sync-Switch's switch step from its BSP share, SSD-SGD's GLU weight
from its period) is declared with the one it comes from, since both differ between the
points; one the step never reads (the epochs, the share) enters as a cell value unused.
A cell batch (training/cell_batch.py) then compiles one program for all its points: the options enter as arrays on the cell axis (`cell_values`),
bound into a copy of the strategy inside the step (`bind`, core/step.py), so each cell's
decisions come from its own values. A lone run never binds: its options stay Python
numbers, constants of its program.

Checks of option values (core/checks.py) pass a traced value by: each cell's value was
checked when its own strategy was built.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import ClassVar

import numpy as np

from .checks import INT32_MAX, is_int, is_number

#: what `program_key` holds in place of a cell option's value
A_CELL_VALUE = "<a cell's value>"


def _declared(obj) -> tuple[str, ...]:
    return tuple(getattr(obj, "cell_options", ())) if dataclasses.is_dataclass(obj) else ()


def _a_value(value) -> bool:
    """A number a cell's array holds exactly: a float, or an integer an int32 holds (a seed
    beyond it stays a constant of its program)."""
    return is_number(value) and (not is_int(value) or -INT32_MAX - 1 <= value <= INT32_MAX)


def option_values(obj, prefix: str = "") -> dict:
    """The object's cell options that hold a number, by dotted name (an option left None,
    or given as something else, is part of the program, not a cell's value)."""
    out = {}
    for name in _declared(obj):
        value = getattr(obj, name)
        if _a_value(value):
            out[prefix + name] = value
        elif _declared(value):
            out.update(option_values(value, f"{prefix}{name}."))
    return out


def program_key(obj):
    """What two strategies must agree on to share a program: their class and every field
    but their cell options' values (which options hold values is itself part of it)."""
    declared = _declared(obj)
    if not declared:
        return obj
    fields = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.name in declared and _a_value(value):
            value = A_CELL_VALUE
        elif f.name in declared:
            value = program_key(value)
        fields.append((f.name, value))
    return type(obj), tuple(fields)


def cell_values(strategy) -> dict[str, np.ndarray]:
    """The strategy's cell options as the arrays a batch stacks on its cell axis: int32 for
    integers, float32 for the rest (the types a lone run's constants take in its program)."""
    return {name: np.asarray(value, np.int32 if is_int(value) else np.float32)
            for name, value in option_values(strategy).items()}


class CellOptions:
    """Base of jaxsel's frozen option holders (strategies, triggers, aggregators): none
    declared by default, and the one way a copy takes a cell's values (`bind`)."""

    cell_options: ClassVar[tuple[str, ...]] = ()

    def take_cell_values(self, values: dict) -> None:
        """Set `values` on this object, a copy `bind` made (frozen fields, set as
        `Strategy.settle` sets them: the constructor's checks ran on the cell's numbers)."""
        for name, value in values.items():
            object.__setattr__(self, name, value)


def bind(obj, values: dict):
    """A copy of `obj` whose cell options are `values` (a cell's traced arrays, by dotted
    name): set on a copy of the built object, not through its constructor, whose checks and
    derived fields were settled with the cell's own numbers."""
    if not values:
        return obj
    nested: dict[str, dict] = {}
    for name, value in values.items():
        head, _, rest = name.partition(".")
        nested.setdefault(head, {})[rest] = value
    bound = copy.copy(obj)
    bound.take_cell_values({head: inner[""] if "" in inner else bind(getattr(obj, head), inner)
                            for head, inner in nested.items()})
    return bound
