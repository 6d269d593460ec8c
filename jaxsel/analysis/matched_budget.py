"""Budget-matched baselines: does an adaptive method beat periodic averaging at the same
number of synchronizations?

A method whose sync pattern is decided during the run (`traits.is_adaptive`: SelSync's
significance test, Sync-Switch's straggler monitor, a two-level method with such a level)
is compared at whatever budget it happens to use. `jaxsel compare --match-budget` adds,
for each such row, local SGD on exactly as many steps as the row's mean sync count over
seeds, rounded (`LocalSGD(syncs=K)`: K of the run's steps, evenly spread,
`triggers.Spread`), run on the same seeds, and says whether the adaptive row beat it beyond
the seed spread: the difference of the two mean accuracies exceeds the sum of their
standard deviations over seeds (`BEYOND_SPREAD`). An integer period could not do this: it
syncs floor(steps / P) times, and a dense pattern falls between two periods (SelSync at
delta = 0.05 syncs on about 60 % of 600 steps; P = 2 gives 50 %, P = 1 100 %).

Local SGD differs from SelSync in two things at once, though: which steps sync, and the
averaging order (after the update; SelSync's authors average before it, each replica
then stepping with its own momentum). So an adaptive trigger-based row also gets the
same method with only its trigger replaced (`same_order_variant`): a schedule of exactly
as many syncs, its forced warm-up first and the rest evenly spread (`triggers.Spread`),
with the row's own sync mode, optimizer-state handling, aggregator, codec and model-state
sync; what it beats or loses to that row is what the selection itself does (issue 58).
"""
from __future__ import annotations

import dataclasses
import math

from ..strategies.traits import is_adaptive  # noqa: F401  (read here by compare and the frontier)
from ..strategies.triggered import ORDERS, Triggered, TriggeredStrategy
from ..training.numbers import plus_minus, significant
from .cells import effective_options, row_config
from .variants import Variant, entry_of

#: what a trigger-based method's sync does besides when: kept by its same-order baseline
SAME_SYNC = ("sync", "sync_opt_state", "aggregator", "sync_model_state", "compress", "error_feedback")

BEYOND_SPREAD = ("beyond the seed spread: the difference of the two mean accuracies exceeds the sum of "
                 "their standard deviations over seeds")


def matched_syncs(target_syncs: float) -> int:
    """The matched count: the adaptive row's mean over seeds, rounded half up."""
    return math.floor(target_syncs + 0.5)


def matched_variant(adaptive: Variant, target_syncs: float) -> Variant:
    """Local SGD on exactly the rounded mean count of `adaptive`'s syncs (the global
    options it takes still apply, except a global --period: `syncs` replaces the period)."""
    k = matched_syncs(target_syncs)
    return Variant("localsgd", {"syncs": k, "period": None}, f"localsgd:syncs={k}")


def matched_label(syncs: int, steps: int, adaptive_entry: str) -> str:
    return f"localsgd ({syncs} of {steps} steps, {ORDERS['model']}, matches {adaptive_entry})"


def same_order_variant(base, adaptive: Variant, target_syncs: float, steps: int) -> Variant | None:
    """`adaptive` with only its trigger replaced by a schedule of as many syncs (the
    rounded mean, `matched_syncs`) over the run's `steps`: its forced warm-up syncs first, the rest evenly spread
    (`triggers.Spread`), as `triggered` with the row's own sync mode, optimizer-state
    handling, aggregator, codec and model-state sync. None where the row is no
    trigger-based strategy (a composition's levels each have their own)."""
    k = matched_syncs(target_syncs)
    return with_trigger(base, adaptive, lambda strategy: {
        "trigger": "spread", "trigger.syncs": k, "trigger.steps": steps,
        "trigger.warmup": min(k, forced_warmup(strategy.trigger))})


def with_trigger(base, adaptive: Variant, trigger, **changes) -> Variant | None:
    """`adaptive` as `triggered` with the trigger options `trigger(strategy)` gives and
    every other part of its sync kept (`SAME_SYNC`, then `changes`); options at
    `triggered`'s defaults are left out of the entry. None for a strategy that is not
    trigger-based."""
    strategy = built(base, adaptive)
    if not isinstance(strategy, Triggered):
        return None
    defaults = {f.name: f.default for f in dataclasses.fields(TriggeredStrategy)}
    kept = {**same_sync(strategy, effective_options(base, adaptive)), **changes}
    options = {**trigger(strategy), **{k: v for k, v in kept.items() if v != defaults.get(k)}}
    return Variant(TriggeredStrategy.name, options, entry_of(TriggeredStrategy.name, options))


def built(base, variant: Variant):
    """The strategy one run of `variant` trains with, as the plan builds it."""
    from ..training.plan import strategy_of

    return strategy_of(row_config(base, variant))


def forced_warmup(trigger) -> int:
    """The syncs a trigger forces first (SelSync's warm-up; inside a `max_local` cap)."""
    inner = getattr(trigger, "inner", trigger)
    return int(getattr(inner, "warmup_steps", 0) or 0)


def same_sync(strategy, effective: dict) -> dict:
    """`SAME_SYNC` as `strategy` has them: a value the row's entry (or a global option)
    set as written, else the strategy's own (a settled aggregator or codec by its
    declared default); None values are left to `triggered`'s default (None)."""
    declared = {f.name: f.default for f in dataclasses.fields(strategy)}
    out = {}
    for key in SAME_SYNC:
        value = getattr(strategy, key)
        if key in effective:
            value = effective[key]
        elif not isinstance(value, (bool, str, type(None))):
            value = declared.get(key)
        if value is not None:
            out[key] = value
    return out


def baseline_trigger(strategy) -> str:
    """A baseline's schedule in words, for results.json."""
    t = strategy.trigger
    warm = f", the first {t.warmup} forced (the method's warm-up)" if getattr(t, "warmup", 0) else ""
    return f"spread: {t.syncs} of {t.steps} steps{warm}, {ORDERS[strategy.sync]}"


def order_facts(strategy) -> dict:
    """results.json's record of a row's averaging order (trigger-based strategies)."""
    if not isinstance(strategy, Triggered):
        return {}
    return {"sync_mode": strategy.sync, "sync_order": ORDERS[strategy.sync],
            "sync_opt_state": bool(strategy.sync_opt_state)}


def matched_slug(syncs: int, adaptive_slug: str) -> str:
    return f"localsgd_syncs={syncs}-matches-{adaptive_slug}"


def same_order_label(baseline: Variant, steps: int, adaptive_entry: str) -> str:
    """The same-order baseline's row name: its schedule and its order, as the method's."""
    o = baseline.options
    order = ORDERS[o.get("sync", TriggeredStrategy.sync)]
    return (f"{baseline.name} spread ({o['trigger.syncs']} of {steps} steps, {order}"
            f"{', momentum too' if o.get('sync_opt_state') else ''}, matches {adaptive_entry})")


def same_order_slug(syncs: int, adaptive_slug: str) -> str:
    return f"same-order_syncs={syncs}-matches-{adaptive_slug}"


def sync_note(matched: dict, adaptive: dict) -> str:
    """The matched row's own syncs, every seed's exactly, next to the adaptive row's mean."""
    counts = sorted({seed["syncs"] for seed in matched.get("per_seed", [])} or {matched["syncs"]})
    exact = (f"exactly {counts[0]} syncs in {'every seed' if len(matched.get('per_seed', [])) > 1 else 'its run'}"
             if len(counts) == 1 else f"{', '.join(map(str, counts))} syncs in its seeds")
    over = " (mean over seeds)" if len(adaptive.get("per_seed", [])) > 1 else ""
    return (f"{matched['strategy']}: {exact}, {adaptive['strategy']}'s "
            f"{significant(matched['matched_syncs'])}{over} rounded")


def verdict(adaptive: dict, matched: dict) -> str:
    """One plain sentence: did the adaptive row beat its budget-matched baseline beyond
    the seed spread (`BEYOND_SPREAD`)?"""
    a, b = adaptive["final_test_accuracy"], matched["final_test_accuracy"]
    sa, sb = adaptive["final_test_accuracy_std"], matched["final_test_accuracy_std"]
    figures = f"{_pm(a, sa)} against {_pm(b, sb)}"
    who = f"{adaptive['strategy']} against its budget-matched baseline {matched['strategy']}"
    if sa is None or sb is None:
        return f"{who}: {figures} with one seed, so no spread to judge by (run --seeds 3 or more)."
    if abs(a - b) <= sa + sb:
        return f"{who}: {figures} over {len(adaptive['per_seed'])} seeds, within the seed spread: neither beat the other."
    if a > b:
        return f"{adaptive['strategy']} beat its budget-matched baseline {matched['strategy']} beyond the seed spread: {figures}."
    return (f"{adaptive['strategy']} did not beat its budget-matched baseline {matched['strategy']}: {figures}; the "
            f"baseline is better beyond the seed spread.")


def _pm(mean: float, std: float | None) -> str:
    return plus_minus(mean, std)   # as the table prints it
