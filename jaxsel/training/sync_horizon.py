"""Will a strategy synchronize at all within the run? A warning for periodic strategies
whose period outlasts the run.

DiLoCo's default H = 500 (the paper's) in a 200-step run never takes an outer step, and
its evaluated global model stays at its initialization: a chance-level result with no
hint why. Static triggers (always, periodic, before, any-of) say exactly when they first
fire; data-dependent ones (SelSync's significance test) cannot be judged in advance.
"""
from __future__ import annotations

import sys

from ..core.options import option_names
from ..core.triggers import UNKNOWN, first_sync_step
from ..strategies.traits import traits_of


#: what a two-level method's level never synchronizing means
LEVEL_CONSEQUENCES = {"inner": "the replicas of a group never average among themselves",
                      "outer": "the groups never average with each other"}


def _first(strategy) -> int | None:
    return first_sync_step(strategy.trigger) if strategy.trigger is not None else UNKNOWN


def _beyond(first, total_steps: int) -> str | None:
    """How the trigger misses the run ("never fires", ...), None when it fires within it."""
    if first == UNKNOWN or (first is not None and first < total_steps):
        return None
    return "never fires" if first is None else f"first fires after step {first + 1}"


def never_syncs_warning(strategy, total_steps: int) -> str | None:
    """One line when `strategy`'s (periodic) synchronization, or a level's of a two-level
    method (`levels`), first falls after the run."""
    desc = strategy.describe()
    if strategy.levels:
        missed = [(lv, _beyond(_first(getattr(strategy, lv)), total_steps)) for lv in strategy.levels]
        parts = [f"the {lv} level's trigger {when}, so {LEVEL_CONSEQUENCES.get(lv, 'it never syncs')}"
                 for lv, when in missed if when]
        return (f"jaxsel: warning: {desc}: {'; '.join(parts)} in this {total_steps}-step run; lower that "
                f"level's period (--opt LEVEL.period=P) or raise --steps") if parts else None
    when = _beyond(_first(strategy), total_steps)
    if when is None:
        return None
    return (f"jaxsel: warning: {desc}: the sync trigger {when}, beyond this {total_steps}-step run, so "
            f"{traits_of(strategy).unsynced}; {remedy(strategy)} or raise --steps")


def remedy(strategy) -> str:
    """How to make the strategy sync sooner, by the option that sets its period as the
    strategy names it (`period` where it has one, superstep's `epochs`, a generic
    trigger's own options), written as the command line takes it: in the strategy's entry
    or with --opt."""
    cls = type(strategy)
    names = option_names(cls) if hasattr(cls, "__dataclass_fields__") else []
    knob = "period" if "period" in names else None
    knob = knob or getattr(traits_of(cls).budget, "knob", None)
    if knob in names:
        return f"lower its {knob} ({strategy.name}:{knob}=... in its entry, or --opt {knob}=...)"
    if "trigger" in names:
        return "give it a trigger that fires within the run (--opt trigger=NAME, --opt trigger.KEY=VALUE)"
    return "make it sync sooner"


def warn_if_never_syncs(strategy, total_steps: int, stream=None) -> str | None:
    """Print `never_syncs_warning` (if any) as one line on stderr; return it."""
    line = never_syncs_warning(strategy, total_steps)
    if line:
        print(line, file=stream or sys.stderr, flush=True)
    return line
