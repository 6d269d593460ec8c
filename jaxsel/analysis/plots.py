"""The comparison's pictures: accuracy against step and bytes, and against projected
time; a sync timeline with SelSync's significance statistic; replica divergence.

Each takes the comparison's rows (`seed_grid.RowRuns`: a variant and its runs, one per
seed) and draws the seed mean with the min-max over seeds as a band. Every label is the
row's (`Variant.label`: the strategy as the run built it, `strategy.describe()`, with the
aggregator in brackets when it is not the mean, or the options a variant entry sets), so
a median-aggregated or re-periodised run is never mistaken for a default.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from ..training.lr_schedule import describe_lr_schedule, milestone_steps, parse_lr_schedule
from .significance_reach import fall_peak, jump_needed, significance_options

LEGEND_NOTE = "aggregator: mean unless [shown]"


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def label(row) -> str:
    return row.label


def setting(row) -> str:
    """One line naming the task, for figure titles."""
    c = row.runs[0].config
    part = c.partition + (" + injection" if c.partition_options.get("injection") else "")
    seeds = [r.config.seed for r in row.runs]
    over = f", seeds {seeds[0]}-{seeds[-1]} (mean, band: min-max)" if len(seeds) > 1 else f", seed {seeds[0]}"
    return (f"{c.dataset} / {c.model}, {c.replicas} replicas x batch {c.batch_size}, {part}, "
            f"{describe_lr_schedule(c.lr_schedule, c.steps)}{over}")


def lr_milestones(row) -> list[int]:
    cfg = row.runs[0].config
    kind, milestones, _ = parse_lr_schedule(cfg.lr_schedule)
    return milestone_steps(milestones, cfg.steps) if kind == "milestones" else []


def band(ax, x, ys, **style):
    """The seed mean of `ys` (one sequence per seed, aligned with `x`) as a line, their
    min-max as a shaded band when there are several seeds; returns the line."""
    ys = np.asarray(ys, dtype=float)
    with warnings.catch_warnings():   # steps where every seed is NaN (SelSync's warm-up) stay NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        mean, low, high = np.nanmean(ys, axis=0), np.nanmin(ys, axis=0), np.nanmax(ys, axis=0)
    (line,) = ax.plot(x, mean, **style)
    if len(ys) > 1:
        ax.fill_between(x, low, high, color=line.get_color(), alpha=0.15, lw=0)
    return line


def eval_curves(row, key: str, x_key: str = "step"):
    """(x: the seed mean of `x_key` at each evaluation, one list of `key` per seed)."""
    x = np.mean([[e[x_key] for e in r.evals] for r in row.runs], axis=0)
    return x, [[e[key] for e in r.evals] for r in row.runs]


def _finish(fig, ax, path: Path, rows, *, xlabel: str, ylabel: str) -> None:
    """One-panel figures: labels, the rows' setting as title, legend, saved and closed."""
    ax.set(xlabel=xlabel, ylabel=ylabel, title=setting(rows[0]))
    ax.title.set_fontsize(9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, title=LEGEND_NOTE, title_fontsize=7)
    _save(fig, path)
    pyplot().close(fig)


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def plot_accuracy_vs_time(rows, target, network: str, path: Path) -> None:
    """Test accuracy against projected wall-clock on `network` (seed means); the target as
    a dashed line and each row's first evaluation at the target marked."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for row in rows:
        t, accs = eval_curves(row, "test_accuracy", "projected_time_s")
        line = band(ax, t, accs, marker=".", label=label(row))
        mean = np.mean(accs, axis=0)
        hit = next((i for i, a in enumerate(mean) if a >= target.accuracy), None)
        if hit is not None:
            ax.plot([t[hit]], [mean[hit]], "o", ms=10, mfc="none", color=line.get_color())
    ax.axhline(target.accuracy, ls="--", color="gray", lw=1, label=f"target: {target.description}")
    _finish(fig, ax, path, rows, xlabel=f"projected wall-clock on {network} (s; compute measured here)",
            ylabel="test accuracy (evaluated model)")


def _significance(run):
    """(steps, per-step max over replicas of Delta_bar) of a run that logs it, else None."""
    rows = [(x["step"], x["delta"]) for x in run.records if "delta" in x]
    if not rows:
        return None
    steps = np.array([s for s, _ in rows])
    d = np.array([np.nan if v is None else v for _, v in rows], dtype=object)
    values = np.array([np.nanmax(np.asarray(v, float)) if np.any(np.isfinite(np.asarray(v, float)))
                       else np.nan for v in d], dtype=float)
    return steps, values


def plot_sync_timeline(rows, path: Path) -> None:
    """Top: one line of ticks per seed of each row, a tick at every step that synchronized.
    Below: each significance-triggered row's Delta_bar (max over replicas: any vote syncs;
    seed mean and min-max) against its delta, with the warm-up shaded; LR milestones dotted."""
    plt = pyplot()
    sig = [(row, [_significance(r) for r in row.runs]) for row in rows]
    sig = [(row, s) for row, s in sig if s[0] is not None]
    seeds = len(rows[0].runs)
    height = len(rows) * (0.35 + 0.15 * seeds) + 0.6
    fig, axes = plt.subplots(1 + bool(sig), 1, figsize=(9, 0.6 + height + 2.6 * bool(sig)), sharex=True,
                             squeeze=False, gridspec_kw={"height_ratios": [height] + [2.6] * bool(sig)})
    top = axes[0][0]
    for i, row in enumerate(rows):
        offsets = i + (np.arange(seeds) - (seeds - 1) / 2) * (0.8 / seeds)
        for off, r in zip(offsets, row.runs):
            top.eventplot([[x["step"] for x in r.records if x["synced"]]], lineoffsets=off,
                          linelengths=0.7 / seeds, colors=f"C{i}")
    top.set_yticks(range(len(rows)), [f"{label(row)}\n{_sync_counts(row)}" for row in rows], fontsize=8)
    top.set_ylim(-0.6, len(rows) - 0.4)
    top.invert_yaxis()
    top.set_title(f"steps that synchronized (a line per seed) -- {setting(rows[0])}", fontsize=9)
    if sig:
        _plot_significance(axes[1][0], sig, rows)
    for ax in (row[0] for row in axes):
        for m in lr_milestones(rows[0]):
            ax.axvline(m, ls=":", color="k", lw=1)
    axes[-1][0].set_xlabel("step (dotted: learning-rate milestones)")
    _save(fig, path)
    plt.close(fig)


def _sync_counts(row) -> str:
    counts = [sum(bool(x["synced"]) for x in r.records) for r in row.runs]
    steps = len(row.runs[0].records)
    if len(counts) == 1:
        return f"{counts[0]} of {steps} steps"
    return f"{np.mean(counts):.4g} of {steps} steps (seeds: {min(counts)}-{max(counts)})"


def _plot_significance(ax, sig, rows) -> None:
    for row, traces in sig:
        color = f"C{rows.index(row)}"
        band(ax, traces[0][0], [v for _, v in traces], color=color, lw=1,
             label=f"{label(row)}: Delta_bar (max over replicas)")
        opts = significance_options(row.runs[0])
        delta, window, alpha = opts.delta, opts.window, opts.alpha
        reach = (f" (from a steady state: a {jump_needed(delta, window, alpha):.3g}x one-step jump of the gradient "
                 f"norm)" if opts.statistic == "smoothed" else "")
        ax.axhline(delta, color=color, ls="--", lw=1, label=f"delta = {delta:g}{reach}")
        if opts.statistic == "smoothed":
            ax.axhline(fall_peak(window, alpha), color="gray", ls=":", lw=1,
                       label=f"peak of a sudden fall of the gradient norm to zero: {fall_peak(window, alpha):.3g}")
        warm = opts.warmup_steps
        if warm:
            ax.axvspan(0, warm, color=color, alpha=0.08, label=f"warm-up (t < {warm}): always votes")
    ax.set_ylabel("Delta_bar")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")


def plot_divergence(rows, path: Path) -> None:
    """Largest distance of a replica's parameters from the replica mean, over steps."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4))
    for i, row in enumerate(rows):
        traces = [[(x["step"], x["divergence"]) for x in r.records if x.get("divergence") is not None]
                  for r in row.runs]
        band(ax, [s for s, _ in traces[0]], [[d for _, d in t] for t in traces], color=f"C{i}", label=label(row))
    for m in lr_milestones(rows[0]):
        ax.axvline(m, ls=":", color="k", lw=1)
    _finish(fig, ax, path, rows, xlabel="step (dotted: learning-rate milestones)",
            ylabel="replica divergence (max L2 distance from the mean)")


def plot_comparison(rows, path: Path) -> None:
    """Test accuracy vs step (linear) and vs cumulative MB all-reduced (log axis, so the
    step-0 evaluation at 0 bytes is left out of that panel rather than drawn as a segment);
    seed means, min-max bands."""
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    for row in rows:
        steps, accs = eval_curves(row, "test_accuracy")
        band(a, steps, accs, marker=".", label=label(row))
        mb, _ = eval_curves(row, "test_accuracy", "bytes_allreduced")
        sent = mb > 0
        if sent.any():
            band(b, mb[sent] / 1e6, np.asarray(accs)[:, sent], marker=".", label=label(row))
    a.set(xlabel="step", ylabel="test accuracy (evaluated model)", title="accuracy vs step")
    b.set(xlabel="MB all-reduced per replica (log; seed mean)", ylabel="test accuracy",
          title="accuracy vs communication (after the first sync)")
    b.set_xscale("log")
    for ax in (a, b):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, title=LEGEND_NOTE, title_fontsize=7)
    fig.suptitle(setting(rows[0]), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
