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
"""
from __future__ import annotations

import math

from ..strategies.traits import is_adaptive  # noqa: F401  (read here by compare and the frontier)
from ..training.numbers import plus_minus, significant
from .variants import Variant

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
    return f"localsgd ({syncs} of {steps} steps, matches {adaptive_entry})"


def matched_slug(syncs: int, adaptive_slug: str) -> str:
    return f"localsgd_syncs={syncs}-matches-{adaptive_slug}"


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
