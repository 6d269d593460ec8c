"""Budget-matched baselines: does an adaptive method beat periodic averaging at the same
number of synchronizations?

A method whose sync pattern is decided during the run (`Strategy.adaptive_sync`: SelSync's
significance test, Sync-Switch's straggler monitor, a two-level method with such a level)
is compared at whatever budget it happens to use. `jaxsel compare --match-budget` adds,
for each such row, local SGD with the period that gives as many syncs as the row's mean
over seeds, run on the same seeds, and says whether the adaptive row beat it beyond the
seed spread: the difference of the two mean accuracies exceeds the sum of their
standard deviations over seeds (`BEYOND_SPREAD`).
"""
from __future__ import annotations

import math

from ..training.numbers import significant
from .variants import Variant

BEYOND_SPREAD = ("beyond the seed spread: the difference of the two mean accuracies exceeds the sum of "
                 "their standard deviations over seeds")


def is_adaptive(strategy) -> bool:
    """Whether `strategy` decides during the run which steps synchronize."""
    adaptive = getattr(strategy, "adaptive_sync", None)
    return bool(adaptive()) if callable(adaptive) else False


def periodic_syncs(steps: int, period: int) -> int:
    """Syncs of local SGD with `period` in a run of `steps` (after steps t with (t+1) % period == 0)."""
    return steps // period


def matched_period(steps: int, target_syncs: float) -> int:
    """The period P >= 1 whose sync count floor(steps / P) is nearest `target_syncs`; of
    the periods with that count, the one nearest steps / target (the adaptive row's mean
    spacing). P = steps + 1 (no sync) matches a target below 0.5.

    Rounding steps / target instead falls short: a period P syncs floor(steps / P) times,
    so the rounded period often lands one sync low (600 steps, 1.6 syncs: round gives
    P = 375 and 1 sync, P = 300 gives 2). The counts reachable with an integer period
    are every integer up to about sqrt(2 * steps), then ever sparser: a dense pattern
    cannot be matched within one sync (600 steps, 400 syncs: P = 1 gives 600, P = 2 300)."""
    if not target_syncs > 0:
        return steps + 1
    # floor(steps / P) falls with P: `first` is the shortest period with at most floor(target)
    # syncs, first - 1 the longest with more; each is its count's period nearest steps / target
    first = steps // (math.floor(target_syncs) + 1) + 1
    candidates = [p for p in (first - 1, first) if p >= 1]
    return min(candidates, key=lambda p: (abs(periodic_syncs(steps, p) - target_syncs), -p))


def matched_variant(adaptive: Variant, steps: int, target_syncs: float) -> Variant:
    """Local SGD at the matched period (the global options it takes still apply)."""
    period = matched_period(steps, target_syncs)
    return Variant("localsgd", {"period": period}, f"localsgd:period={period}")


def matched_label(period: int, adaptive_entry: str) -> str:
    return f"localsgd (period {period}, matches {adaptive_entry})"


def matched_slug(period: int, adaptive_slug: str) -> str:
    return f"localsgd_period={period}-matches-{adaptive_slug}"


def sync_note(matched: dict, adaptive: dict) -> str:
    """The matched row's own syncs next to the target; when it misses by more than one
    sync, the neighbouring periods' counts show that no integer period comes closer."""
    period, steps = matched["options"]["period"], matched["steps"]
    over = " (means over seeds)" if len(matched.get("per_seed", [])) > 1 else ""
    line = (f"{matched['strategy']}: {significant(matched['syncs'])} syncs against {adaptive['strategy']}'s "
            f"{significant(matched['matched_syncs'])}{over}")
    if abs(matched["syncs"] - matched["matched_syncs"]) > 1:
        near = ", ".join(f"period {p}: {periodic_syncs(steps, p)}" for p in (period - 1, period + 1) if p >= 1)
        line += f"; no integer period comes closer ({near})"
    return line


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
    return significant(mean) if std is None else f"{significant(mean)} ± {significant(std, 2)}"
