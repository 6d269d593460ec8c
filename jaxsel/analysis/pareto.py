"""pareto.png: what each method buys with what it spends.

Two panels, one point per row of a comparison: the final accuracy (seed mean, error bar
± one standard deviation over seeds) against the MB each replica sent, and against the
projected wall-clock to the target accuracy. The non-dominated rows (no other row is at
least as accurate for no more cost, and better in one) are joined as the front.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

from .plots import pyplot


def front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the non-dominated points (x: a cost, lower is better; y: higher is
    better), in increasing x."""
    keep = [i for i, (x, y) in enumerate(points)
            if not any(x2 <= x and y2 >= y and (x2, y2) != (x, y) for x2, y2 in points)]
    return sorted(keep, key=lambda i: points[i])


def _panel(ax, rows: list[dict], cost, xlabel: str) -> list[str]:
    """Points, error bars, labels and the front of one panel; returns the rows left out
    (no cost: the target never reached)."""
    shown = [(r, cost(r)) for r in rows]
    left_out = [r["strategy"] for r, c in shown if c is None]
    shown = [(r, c) for r, c in shown if c is not None]
    for r, c in shown:
        ax.errorbar([c], [r["final_test_accuracy"]], yerr=[r.get("final_test_accuracy_std") or 0.0], fmt="o",
                    capsize=3, color=f"C{rows.index(r)}")
        ax.annotate(r["strategy"], (c, r["final_test_accuracy"]), textcoords="offset points", xytext=(5, 4),
                    fontsize=7)
    best = front([(c, r["final_test_accuracy"]) for r, c in shown])
    if best:
        ax.plot([shown[i][1] for i in best], [shown[i][0]["final_test_accuracy"] for i in best], "--", color="gray",
                lw=1, zorder=0, label="non-dominated front")
    ax.set(xlabel=xlabel, ylabel="final test accuracy (mean ± std over seeds)")
    ax.grid(alpha=0.3)
    return left_out


def plot_pareto(rows: list[dict], title: str, path: Path) -> None:
    """pareto.png from results.json's rows."""
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.8))
    _panel(a, rows, lambda r: r["bytes_allreduced"] / 1e6, "MB sent per replica (seed mean; symlog)")
    a.set_xscale("symlog", linthresh=0.1)   # log-like, and 0 MB (a row that never syncs) still shows
    from matplotlib.ticker import FuncFormatter

    a.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    a.set_title("accuracy against communication", fontsize=9)
    never = _panel(b, rows, lambda r: r.get("time_to_target_s"),
                   f"projected wall-clock to the target on {rows[0].get('project_network', '?')} (s)")
    b.set_title(textwrap.fill(f"accuracy against time to {rows[0].get('target', 'the target')}", 80), fontsize=8)
    if never:
        b.text(0.02, 0.02, textwrap.fill(f"never reached the target: {'; '.join(never)}", 90), fontsize=6,
               transform=b.transAxes, va="bottom", color="dimgray")
    a.legend(fontsize=7, loc="lower right")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
