"""Will a strategy show its method within the run? Warnings, one line each, for periodic
strategies whose period outlasts the run, for a run no longer than the method's warm-up,
and (after the run) for an adaptive method that never synced after its warm-up.

DiLoCo's default H = 500 (the paper's) in a 200-step run never takes an outer step, and
its evaluated global model stays at its initialization: a chance-level result with no
hint why. Static triggers (always, periodic, before, any-of) say exactly when they first
fire; data-dependent ones (SelSync's significance test) cannot be judged in advance, but
their forced warm-up can: a 20-step SelSync run (W = 25) is all warm-up, BSP in all but
name ("synced 20 of 20"), and a run whose test never fires after it is local SGD without
averaging. Either reported as SelSync's result says nothing about SelSync.
"""
from __future__ import annotations

from ..core.options import option_names
from ..core.triggers import UNKNOWN, AnyOf, Before, Capped, Significance, first_sync_step
from ..strategies.traits import is_adaptive, traits_of


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


def warmup_length(strategy) -> int:
    """The steps a strategy forces to sync before its method decides (0: none): SelSync's
    forced syncs (`warmup`, else until Delta_bar's window is full), a `before` trigger's
    steps, SSD-SGD's BSP warm-up (`warmup_steps`), Post-local SGD's BSP phase (`switch_step`)."""
    for field in ("switch_step", "warmup_steps"):   # Post-local SGD's BSP phase, SSD-SGD's BSP warm-up
        declared = getattr(strategy, field, None)
        if isinstance(declared, int) and not isinstance(declared, bool):
            return declared
    return _trigger_warmup(getattr(strategy, "trigger", None)) if not strategy.levels else 0


def _trigger_warmup(trigger) -> int:
    if isinstance(trigger, Significance):
        return int(trigger.warmup_steps)
    if isinstance(trigger, Capped):
        return _trigger_warmup(trigger.inner)
    if isinstance(trigger, Before):
        return int(trigger.step)
    if isinstance(trigger, AnyOf):
        return max((_trigger_warmup(t) for t in trigger.triggers), default=0)
    return 0


def all_warmup_warning(strategy, total_steps: int) -> str | None:
    """One line when the run is no longer than the strategy's warm-up: every step it takes
    is forced, so it never shows the method."""
    warm = warmup_length(strategy)
    if warm < total_steps:
        return None
    return (f"jaxsel: warning: {strategy.describe()}: its first {warm} steps are a warm-up that the method does not "
            f"decide, and this run has {total_steps}: its result is the warm-up's, not the method's; raise --steps "
            f"past {warm}")


def late_note(label: str, strategy, seeds_records: dict[int, list[dict]], total_steps: int) -> str | None:
    """A job's note (compare's table) for the seeds of one row that never synced after the
    warm-up, in place of each cell's warning (None: every seed synced after it)."""
    late = [seed for seed, records in seeds_records.items()
            if no_sync_after_warmup_warning(strategy, records, total_steps)]
    if not late:
        return None
    which = "every seed" if len(late) == len(seeds_records) else \
        f"seed{'s' * (len(late) > 1)} {', '.join(map(str, late))} of {len(seeds_records)}"
    return (f"{label}: no sync after its {warmup_length(strategy)}-step warm-up in {which}: there the replicas never "
            f"averaged after it, so the result is local training's, not the method's")


def no_sync_after_warmup_warning(strategy, records: list[dict], total_steps: int) -> str | None:
    """After the run: one line when an adaptive strategy (one that decides during the run
    which steps sync) never synced after its warm-up (a run longer than it)."""
    warm = warmup_length(strategy)
    if warm >= total_steps or not is_adaptive(strategy):
        return None
    after = [r for r in records if r["step"] >= warm]
    if not after or any(r["synced"] for r in after):
        return None
    return (f"jaxsel: warning: {strategy.describe()}: no sync after its {warm}-step warm-up in this "
            f"{total_steps}-step run: from step {warm} on the replicas never averaged, so its result is local "
            f"training's, not the method's; make it sync more readily (e.g. a lower delta) or run longer")
