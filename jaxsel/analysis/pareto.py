"""pareto.png: what each method buys with what it spends.

Two panels, one point per row of a comparison: the final accuracy (seed mean, error bar
± one standard deviation over seeds) against the MB each replica sent, and against the
projected wall-clock to the target accuracy. The non-dominated rows (no other row is at
least as accurate for no more cost, and better in one) are joined as the front.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .plots import legend_below, new_figure, row_color, save, wrapped


def front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the non-dominated points (x: a cost, lower is better; y: higher is
    better), in increasing x."""
    keep = [i for i, (x, y) in enumerate(points)
            if not any(x2 <= x and y2 >= y and (x2, y2) != (x, y) for x2, y2 in points)]
    return sorted(keep, key=lambda i: points[i])


def _panel(ax, rows: list[dict], cost) -> list:
    """Each row's point (its colour in every picture of the job: `row_color`) with its
    error bar, and the front of one panel; returns the rows' points (None where the row
    has no cost: the target never reached)."""
    points = []
    for i, r in enumerate(rows):
        c = cost(r)
        points.append(None if c is None else ax.errorbar(
            [c], [r["final_test_accuracy"]], yerr=[r.get("final_test_accuracy_std") or 0.0], fmt="o", capsize=3,
            color=row_color(i)))
    shown = [(r, cost(r)) for r in rows if cost(r) is not None]
    best = front([(c, r["final_test_accuracy"]) for r, c in shown])
    if best:
        ax.plot([shown[i][1] for i in best], [shown[i][0]["final_test_accuracy"] for i in best], "--", color="gray",
                lw=1, zorder=0)
    ax.grid(alpha=0.3)
    return points


#: room on each side of the points, as a share of their extent on the axis's scale
MARGIN = 0.08


def fit_to_points(ax, xs: list[float], lows: list[float], highs: list[float]) -> None:
    """Axis limits from the data's extent (x: `xs`; y: each point's error bar, `lows` to
    `highs`) plus MARGIN on each side, measured on each axis's own scale (the symlog MB
    axis too): matplotlib's own limits ran to a point's centre at an extreme (a fixed left
    edge at 0, a symlog end), which cut its marker in half."""
    if not xs:
        return
    for axis, low, high, setter in ((ax.xaxis, min(xs), max(xs), ax.set_xlim),
                                    (ax.yaxis, min(lows), max(highs), ax.set_ylim)):
        forward = axis.get_transform()
        a, b = (float(v) for v in forward.transform(np.array([low, high], float)))
        pad = MARGIN * (b - a) if b > a else 0.5
        setter(*(float(v) for v in forward.inverted().transform(np.array([a - pad, b + pad]))))


def seconds_to_target(row: dict) -> float | None:
    """The row's cost-model seconds to the target (a results.json written before it: the
    projection's, whose compute was measured)."""
    return row.get("model_time_to_target_s", row.get("time_to_target_s"))


def figure_pareto(rows: list[dict], title: str):
    """pareto.png's figure from results.json's rows: the two panels share the accuracy
    axis, so a panel with one point is read on the same scale as the other."""
    fig, axes = new_figure(12, 5.6, 1, 2, sharey=True)
    a, b = axes[0]
    handles = _panel(a, rows, lambda r: r["bytes_allreduced"] / 1e6)
    a.set_xscale("symlog", linthresh=0.1)   # log-like, and 0 MB (a row that never syncs) still shows
    from matplotlib.ticker import FuncFormatter

    a.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    a.set(xlabel="MB sent per replica (seed mean; symlog)", ylabel="final test accuracy (mean ± std over seeds)")
    a.set_title("accuracy against communication", fontsize=9)
    reached = _panel(b, rows, seconds_to_target)
    accuracy = [(r["final_test_accuracy"], r.get("final_test_accuracy_std") or 0.0) for r in rows]
    lows, highs = [m - s for m, s in accuracy], [m + s for m, s in accuracy]
    fit_to_points(a, [r["bytes_allreduced"] / 1e6 for r in rows], lows, highs)
    times = [t for t in map(seconds_to_target, rows) if t is not None]
    fit_to_points(b, [0.0, *times] if times else [], lows, highs)   # time from the start: 0 in view
    b.set_xlabel(f"projected wall-clock to the target on {rows[0].get('project_network', '?')} (s)")
    b.set_title(wrapped(f"accuracy against time to {rows[0].get('target', 'the target')}", fig, 9, 0.45),
                fontsize=9)
    labels = [r["strategy"] + ("" if p is not None else " (never reached the target: not in the right panel)")
              for r, p in zip(rows, reached)]
    from matplotlib.lines import Line2D

    front_line = Line2D([], [], ls="--", color="gray", lw=1)
    legend_below(fig, [*handles, front_line], [*labels, "non-dominated front"])
    fig.suptitle(wrapped(title, fig, 9), fontsize=9)
    return fig


def plot_pareto(rows: list[dict], title: str, path: Path) -> None:
    """pareto.png from results.json's rows."""
    save(figure_pareto(rows, title), path)
