"""The comparison's pictures: accuracy against step and bytes, and against projected
time; a sync timeline with SelSync's significance statistic; replica divergence.

Each takes the strategies' `RunResult`s; every label is the strategy as the run built it
(`strategy.describe()`: aggregator in brackets when it is not the mean, key options in
parentheses), so a median-aggregated or re-periodised run is never mistaken for a default.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .lr_schedule import describe_lr_schedule, milestone_steps, parse_lr_schedule
from .significance_reach import fall_peak, jump_needed, significance_options

LEGEND_NOTE = "aggregator: mean unless [shown]"


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def label(run) -> str:
    return run.final["strategy"]


def setting(run) -> str:
    """One line naming the task, for figure titles."""
    c = run.config
    part = c.partition + (" + injection" if c.partition_options.get("injection") else "")
    return (f"{c.dataset} / {c.model}, {c.replicas} replicas x batch {c.batch_size}, {part}, "
            f"{describe_lr_schedule(c.lr_schedule, c.steps)}")


def lr_milestones(run) -> list[int]:
    kind, milestones, _ = parse_lr_schedule(run.config.lr_schedule)
    return milestone_steps(milestones, run.config.steps) if kind == "milestones" else []


def _finish(fig, ax, path: Path, runs, *, xlabel: str, ylabel: str) -> None:
    """One-panel figures: labels, the runs' setting as title, legend, saved and closed."""
    ax.set(xlabel=xlabel, ylabel=ylabel, title=setting(runs[0]))
    ax.title.set_fontsize(9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, title=LEGEND_NOTE, title_fontsize=7)
    _save(fig, path)
    pyplot().close(fig)


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def plot_accuracy_vs_time(runs, target, network: str, path: Path) -> None:
    """Test accuracy against projected wall-clock on `network`; the target as a dashed line
    and each run's first evaluation at the target marked."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for r in runs:
        t = [e["projected_time_s"] for e in r.evals]
        acc = [e["test_accuracy"] for e in r.evals]
        (line,) = ax.plot(t, acc, marker=".", label=label(r))
        hit = next((e for e in r.evals if e["test_accuracy"] >= target.accuracy), None)
        if hit is not None:
            ax.plot([hit["projected_time_s"]], [hit["test_accuracy"]], "o", ms=10, mfc="none",
                    color=line.get_color())
    ax.axhline(target.accuracy, ls="--", color="gray", lw=1, label=f"target: {target.description}")
    _finish(fig, ax, path, runs, xlabel=f"projected wall-clock on {network} (s; compute measured here)",
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


def plot_sync_timeline(runs, path: Path) -> None:
    """Top: one row per strategy, a tick at every step that synchronized. Below: each
    significance-triggered run's Delta_bar (max over replicas: any vote syncs) against its
    delta, with the warm-up shaded; LR milestones dotted on both."""
    plt = pyplot()
    sig = [(r, _significance(r)) for r in runs]
    sig = [(r, s) for r, s in sig if s is not None]
    fig, axes = plt.subplots(1 + bool(sig), 1, figsize=(9, 1.2 + 0.45 * len(runs) + 2.6 * bool(sig)),
                             sharex=True, squeeze=False, gridspec_kw={"height_ratios": [len(runs) * 0.5 + 0.6]
                                                                     + [2.6] * bool(sig)})
    top = axes[0][0]
    for i, r in enumerate(runs):
        steps = [x["step"] for x in r.records if x["synced"]]
        top.eventplot([steps], lineoffsets=i, linelengths=0.7, colors=f"C{i}")
    counts = [sum(bool(x["synced"]) for x in r.records) for r in runs]
    top.set_yticks(range(len(runs)), [f"{label(r)}\n{n} of {len(r.records)} steps" for r, n in zip(runs, counts)],
                   fontsize=8)
    top.set_ylim(-0.6, len(runs) - 0.4)
    top.invert_yaxis()
    top.set_title(f"steps that synchronized -- {setting(runs[0])}", fontsize=9)
    if sig:
        _plot_significance(axes[1][0], sig, runs)
    for ax in (row[0] for row in axes):
        for m in lr_milestones(runs[0]):
            ax.axvline(m, ls=":", color="k", lw=1)
    axes[-1][0].set_xlabel("step (dotted: learning-rate milestones)")
    _save(fig, path)
    plt.close(fig)


def _plot_significance(ax, sig, runs) -> None:
    for r, (steps, values) in sig:
        color = f"C{runs.index(r)}"
        ax.plot(steps, values, color=color, lw=1, label=f"{label(r)}: Delta_bar (max over replicas)")
        delta, window, alpha = significance_options(r)
        ax.axhline(delta, color=color, ls="--", lw=1,
                   label=f"delta = {delta:g} (from a steady state: a {jump_needed(delta, window, alpha):.3g}x "
                         f"one-step jump of the gradient norm)")
        ax.axhline(fall_peak(window, alpha), color="gray", ls=":", lw=1,
                   label=f"peak of a sudden fall of the gradient norm to zero: {fall_peak(window, alpha):.3g}")
        warm = 2 * window - 1
        ax.axvspan(0, warm, color=color, alpha=0.08, label=f"warm-up (t < 2W-1 = {warm}): always votes")
    ax.set_ylabel("Delta_bar")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")


def plot_divergence(runs, path: Path) -> None:
    """Largest distance of a replica's parameters from the replica mean, over steps."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4))
    for i, r in enumerate(runs):
        pts = [(x["step"], x["divergence"]) for x in r.records if x.get("divergence") is not None]
        ax.plot(*(zip(*pts) if pts else ([], [])), color=f"C{i}", label=label(r))
    for m in lr_milestones(runs[0]):
        ax.axvline(m, ls=":", color="k", lw=1)
    _finish(fig, ax, path, runs, xlabel="step (dotted: learning-rate milestones)",
            ylabel="replica divergence (max L2 distance from the mean)")


def plot_comparison(runs, path: Path) -> None:
    """Test accuracy vs step (linear) and vs cumulative MB all-reduced (log axis, so the
    step-0 evaluation at 0 bytes is left out of that panel rather than drawn as a segment)."""
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    for r in runs:
        steps = [e["step"] for e in r.evals]
        acc = [e["test_accuracy"] for e in r.evals]
        a.plot(steps, acc, marker=".", label=label(r))
        sent = [(e["bytes_allreduced"] / 1e6, e["test_accuracy"]) for e in r.evals if e["bytes_allreduced"] > 0]
        if sent:
            b.plot(*zip(*sent), marker=".", label=label(r))
    a.set(xlabel="step", ylabel="test accuracy (evaluated model)", title="accuracy vs step")
    b.set(xlabel="MB all-reduced per replica (log)", ylabel="test accuracy",
          title="accuracy vs communication (after the first sync)")
    b.set_xscale("log")
    for ax in (a, b):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, title=LEGEND_NOTE, title_fontsize=7)
    fig.suptitle(setting(runs[0]), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
