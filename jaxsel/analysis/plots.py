"""The comparison's pictures: accuracy against step and bytes, and against projected
time; a sync timeline with SelSync's significance statistic; replica divergence and correlation.

Each takes the comparison's rows (`seed_grid.RowRuns`: a variant and its runs, one per
seed) and draws the seed mean with the min-max over seeds as a band. Every label is the
row's (`Variant.label`: the strategy as the run built it, `strategy.describe()`, with the
aggregator in brackets when it is not the mean, or the options a variant entry sets), so
a median-aggregated or re-periodised run is never mistaken for a default.

What every picture of a job keeps, so that one can be read beside another (and
tests/test_pictures.py checks on the drawn figures):
- one colour per row, the row's place in the job (`row_color`), in every picture;
- legends outside the axes (`legend_below`), never over the data;
- nothing cut off: figures lay themselves out (matplotlib's constrained layout) and long
  titles are wrapped to the figure's width (`wrapped`).

A figure is made of panels, one function each, which draw into an axes they are given
(`accuracy_panel`, `sync_ticks_panel`, `significance_panel`, `divergence_panel`,
`correlation_panel`); the
`figure_*` functions lay panels out and return the figure, `plot_*` save it.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from ..training.lr_schedule import milestone_steps, parse_lr_schedule
from .significance_reach import fall_peak, jump_needed, significance_options
from .task_setting import TaskSetting

LEGEND_NOTE = "aggregator: mean unless [shown]"
#: dots per inch of every saved picture
DPI = 110


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# ------------------------------------------------------------------ shared conventions

def palette() -> list:
    """Twenty distinct colours: matplotlib's ten strong ones (tab10, the default cycle), then
    tab20's ten light ones, so rows 1-10 look as matplotlib's defaults would draw them."""
    plt = pyplot()
    light = plt.get_cmap("tab20").colors[1::2]
    return [*plt.get_cmap("tab10").colors, *light]


def row_color(i: int):
    """The colour of a job's `i`-th row (0-based), the same in every picture of the job."""
    colors = palette()
    return colors[i % len(colors)]


def row_style(i: int) -> dict:
    """Colour, and past the palette's twenty colours a dashed line, so no two rows of a job
    (up to 40) look alike."""
    return {"color": row_color(i), "ls": "-" if i < len(palette()) else "--"}


def new_figure(width: float, height: float, rows: int = 1, cols: int = 1, **kw):
    """(figure, 2-D array of axes) laid out by matplotlib's constrained layout, which makes
    room for titles, labels and legends placed outside the axes."""
    plt = pyplot()
    fig, axes = plt.subplots(rows, cols, figsize=(width, height), squeeze=False, layout="constrained", **kw)
    return fig, axes


def wrapped(text: str, fig, fontsize: float, share: float = 1.0) -> str:
    """`text` broken at spaces into lines that each fit in `share` of the figure's width
    at `fontsize`, measured by the figure's renderer (a title longer than the figure is
    cut off when saved)."""
    from matplotlib.font_manager import FontProperties

    renderer, font = fig.canvas.get_renderer(), FontProperties(size=fontsize)
    limit = 0.95 * share * fig.get_figwidth() * fig.dpi

    def fits(line: str) -> bool:
        return renderer.get_text_width_height_descent(line, font, ismath=False)[0] <= limit

    lines: list[str] = []
    for word in text.split(" "):
        if lines and fits(f"{lines[-1]} {word}"):
            lines[-1] += f" {word}"
        else:
            lines.append(word)
    return "\n".join(lines)


def legend_below(fig, handles, labels, *, title: str | None = LEGEND_NOTE, fontsize: float = 8,
                 ncols: int | None = None):
    """One legend under every panel of `fig`, outside the axes."""
    if ncols is None:
        longest = max((len(t) for t in labels), default=1)
        ncols = max(1, min(len(labels), int(fig.get_figwidth() * 72 / (0.55 * fontsize * (longest + 6)))))
    return fig.legend(handles, labels, loc="outside lower center", ncols=ncols, fontsize=fontsize, title=title,
                      title_fontsize=fontsize - 1, frameon=False)


def save(fig, path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    pyplot().close(fig)


def label(row) -> str:
    return row.label


def row_task(row) -> TaskSetting:
    """The task the row's runs trained (its first run's recorded sections: a row's runs
    differ by seed alone)."""
    return TaskSetting.of(*row.runs[0].task_sections)


def setting(row) -> str:
    """One line naming the task, for figure titles."""
    task = row_task(row)
    seeds = [r.seed for r in row.runs]
    over = f", seeds {seeds[0]}-{seeds[-1]} (mean, band: min-max)" if len(seeds) > 1 else f", seed {seeds[0]}"
    return f"{task.head}, {task.shards}, {task.schedule}{over}"


def lr_milestones(row) -> list[int]:
    task = row_task(row)
    kind, milestones, _ = parse_lr_schedule(task.lr_schedule)
    return milestone_steps(milestones, task.steps) if kind == "milestones" else []


def mark_milestones(ax, row) -> None:
    for m in lr_milestones(row):
        ax.axvline(m, ls=":", color="k", lw=1)


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


def _row_legend(fig, rows, handles) -> None:
    legend_below(fig, handles, [label(row) for row in rows])


# ------------------------------------------------------------------------------ panels

def accuracy_panel(ax, rows, x_key: str = "step", *, unit: float = 1.0, after_first_sync: bool = False) -> list:
    """Each row's test accuracy (seed mean, min-max band) against `x_key` of its
    evaluations, in units of `unit` (1e6: bytes as MB); `after_first_sync` leaves out
    evaluations at 0 (bytes, on a log axis). Returns the rows' lines, in row order (None
    where nothing was drawn)."""
    lines = []
    for i, row in enumerate(rows):
        x, accs = eval_curves(row, "test_accuracy", x_key)
        x = x / unit
        keep = x > 0 if after_first_sync else np.ones(len(x), bool)
        lines.append(band(ax, x[keep], np.asarray(accs)[:, keep], marker=".", **row_style(i)) if keep.any() else None)
    ax.grid(alpha=0.3)
    return lines


#: the share of sync_timeline.png's width kept for the rows' names, left of the plot area
LABEL_COLUMN = 0.2


def sync_ticks_panel(ax, rows) -> None:
    """One line of ticks per seed of each row, a tick at every step that synchronized;
    each row named with its sync count, wrapped within a column of its own (LABEL_COLUMN
    of the figure): a long label (a matched baseline's) took half the plot's width."""
    seeds = len(rows[0].runs)
    for i, row in enumerate(rows):
        offsets = i + (np.arange(len(row.runs)) - (seeds - 1) / 2) * (0.8 / seeds)
        for off, r in zip(offsets, row.runs):
            ax.eventplot([[x["step"] for x in r.records if x["synced"]]], lineoffsets=off,
                         linelengths=0.7 / seeds, colors=[row_color(i)], linestyles=row_style(i)["ls"])
    fig = ax.figure
    names = [wrapped(label(row), fig, 8, LABEL_COLUMN) + "\n" + wrapped(sync_counts(row), fig, 8, LABEL_COLUMN)
             for row in rows]
    ax.set_yticks(range(len(rows)), names, fontsize=8)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.invert_yaxis()
    fig.get_layout_engine().set(rect=(LABEL_COLUMN, 0, 1 - LABEL_COLUMN, 1))   # the labels' own column
    ax.yaxis.set_in_layout(False)   # so a long label wraps in its column and never narrows the plot


def sync_counts(row) -> str:
    """The row's syncs: "49 of 200 steps", "... in every seed" when the seeds agree, else
    the mean with each seed's range."""
    counts = [sum(bool(x["synced"]) for x in r.records) for r in row.runs]
    steps = len(row.runs[0].records)
    if len(set(counts)) == 1:
        return f"{counts[0]} of {steps} steps" + (" in every seed" if len(counts) > 1 else "")
    return f"{np.mean(counts):.3g} of {steps} steps on average (seeds: {min(counts)} to {max(counts)})"


def significance(run):
    """(steps, per-step max over replicas of Delta_bar) of a run that logs it, else None."""
    rows = [(x["step"], x["delta"]) for x in run.records if "delta" in x]
    if not rows:
        return None
    steps = np.array([s for s, _ in rows])
    d = np.array([np.nan if v is None else v for _, v in rows], dtype=object)
    values = np.array([np.nanmax(np.asarray(v, float)) if np.any(np.isfinite(np.asarray(v, float)))
                       else np.nan for v in d], dtype=float)
    return steps, values


def significance_panel(ax, rows) -> tuple[list, list[str]]:
    """Each significance-triggered row's Delta_bar (max over replicas: any vote syncs; seed
    mean and min-max) against its delta, with the warm-up shaded. Returns the legend's
    (handles, labels)."""
    handles, labels = [], []

    def keep(artist, text):
        handles.append(artist)
        labels.append(text)

    for i, row in enumerate(rows):
        traces = [significance(r) for r in row.runs]
        if traces[0] is None:
            continue
        color = row_color(i)
        keep(band(ax, traces[0][0], [v for _, v in traces], color=color, lw=1),
             f"{label(row)}: Delta_bar (max over replicas)")
        opts = significance_options(row.runs[0])
        delta, window, alpha = opts.delta, opts.window, opts.alpha
        reach = (f" (from a steady state: a {jump_needed(delta, window, alpha):.3g}x one-step jump of the gradient "
                 f"norm)" if opts.statistic == "smoothed" else "")
        keep(ax.axhline(delta, color=color, ls="--", lw=1), f"delta = {delta:g}{reach}")
        if opts.statistic == "smoothed":
            keep(ax.axhline(fall_peak(window, alpha), color="gray", ls=":", lw=1),
                 f"peak of a sudden fall of the gradient norm to zero: {fall_peak(window, alpha):.3g}")
        warm = opts.warmup_steps
        if warm:
            keep(ax.axvspan(0, warm, color=color, alpha=0.08), f"warm-up (t < {warm}): always votes")
    ax.set_ylabel("Delta_bar")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    return handles, labels


def divergence_panel(ax, rows) -> list:
    """Largest distance of a replica's parameters from the replica mean, over steps (seed
    mean, min-max band); LR milestones dotted. Returns the rows' lines."""
    lines = []
    for i, row in enumerate(rows):
        traces = [[(x["step"], x["divergence"]) for x in r.records if x.get("divergence") is not None]
                  for r in row.runs]
        lines.append(band(ax, [s for s, _ in traces[0]], [[d for _, d in t] for t in traces], **row_style(i)))
    mark_milestones(ax, rows[0])
    why = "; ".join(filter(None, (lone_local_samples(row) for row in rows)))
    ax.set(xlabel=wrapped("step (dotted: learning-rate milestones)" + (f". {why}" if why else ""), ax.figure, 8, 0.45),
           ylabel="replica divergence\n(max L2 distance from the mean)")
    ax.grid(alpha=0.3)
    return lines


def lone_local_samples(row) -> str | None:
    """Why a row that syncs on most steps shows spikes: divergence is sampled every few
    steps after the step's sync (0 right after a model average), so its curve is 0 but
    where a sample falls on one of its few local steps (the matched local SGD baseline of
    567 syncs in 600 steps: steps 109, 309 and 509). None when no sample of the row was a
    lone local step among synced ones."""
    run = row.runs[0]
    synced = {x["step"]: bool(x["synced"]) for x in run.records}
    sampled = [x["step"] for x in run.records if x.get("divergence") is not None]
    if sum(synced.values()) <= len(synced) / 2:
        return None
    lone = [t for t in sampled if not synced[t]]
    if not lone or len(lone) == len(sampled):
        return None
    shown = ", ".join(map(str, lone[:6])) + (", ..." if len(lone) > 6 else "")
    return (f"{label(row)}: sampled after each step's sync, its divergence is 0 but at samples that fell on its "
            f"local steps ({shown})")


def correlation_panel(ax, rows) -> None:
    """The replicas' mean pairwise Pearson correlation of parameters, over steps (seed mean,
    min-max band); LR milestones dotted. A row of one replica has no pairs and no line."""
    for i, row in enumerate(rows):
        traces = [[(x["step"], x["correlation"]) for x in r.records if x.get("correlation") is not None]
                  for r in row.runs]
        if traces[0]:
            band(ax, [s for s, _ in traces[0]], [[c for _, c in t] for t in traces], **row_style(i))
    mark_milestones(ax, rows[0])
    ax.set(xlabel="step (dotted: learning-rate milestones)",
           ylabel="replica correlation\n(mean pairwise Pearson r)")
    ax.grid(alpha=0.3)


# ----------------------------------------------------------------------------- figures

def figure_accuracy_vs_time(rows, target, network: str):
    """Test accuracy against projected wall-clock on `network` (seed means); the target as
    a dashed line and each row's first evaluation at the target marked."""
    fig, axes = new_figure(8, 5.2)
    ax = axes[0][0]
    lines = accuracy_panel(ax, rows, "projected_time_s")
    for i, row in enumerate(rows):
        t, accs = eval_curves(row, "test_accuracy", "projected_time_s")
        mean = np.mean(accs, axis=0)
        hit = next((k for k, a in enumerate(mean) if a >= target.accuracy), None)
        if hit is not None:
            ax.plot([t[hit]], [mean[hit]], "o", ms=10, mfc="none", color=row_color(i))
    goal = ax.axhline(target.accuracy, ls="--", color="gray", lw=1)
    ax.set(xlabel=f"projected wall-clock on {network} (s; compute measured here)",
           ylabel="test accuracy (evaluated model)")
    fig.suptitle(wrapped(setting(rows[0]), fig, 9), fontsize=9)
    legend_below(fig, [*lines, goal], [*(label(r) for r in rows), f"target: {target.description} (circled: reached)"])
    return fig


def plot_accuracy_vs_time(rows, target, network: str, path: Path) -> None:
    save(figure_accuracy_vs_time(rows, target, network), path)


def figure_sync_timeline(rows):
    """Top: one line of ticks per seed of each row, a tick at every step that synchronized.
    Below: each significance-triggered row's Delta_bar against its delta
    (`significance_panel`); LR milestones dotted."""
    has_sig = any(significance(row.runs[0]) is not None for row in rows)
    seeds = len(rows[0].runs)
    height = len(rows) * (0.35 + 0.15 * seeds) + 0.6
    fig, axes = new_figure(10, 1.2 + height + 3.6 * has_sig, 1 + has_sig, 1, sharex=True,
                           gridspec_kw={"height_ratios": [height] + [2.6] * has_sig})
    top = axes[0][0]
    sync_ticks_panel(top, rows)
    fig.suptitle(wrapped(f"steps that synchronized (a line per seed); {setting(rows[0])}", fig, 9), fontsize=9)
    if has_sig:
        handles, labels = significance_panel(axes[1][0], rows)
        legend_below(fig, handles, labels, title=None, fontsize=7, ncols=1)
    for ax in (row[0] for row in axes):
        mark_milestones(ax, rows[0])
    axes[-1][0].set_xlabel("step (dotted: learning-rate milestones)")
    return fig


def plot_sync_timeline(rows, path: Path) -> None:
    save(figure_sync_timeline(rows), path)


def figure_divergence(rows):
    """How far the replicas drift apart (`divergence_panel`) and how alike they stay
    (`correlation_panel`), side by side, one legend under both."""
    fig, axes = new_figure(12, 5, 1, 2)
    lines = divergence_panel(axes[0][0], rows)
    correlation_panel(axes[0][1], rows)
    fig.suptitle(wrapped(setting(rows[0]), fig, 9), fontsize=9)
    _row_legend(fig, rows, lines)
    return fig


def plot_divergence(rows, path: Path) -> None:
    save(figure_divergence(rows), path)


def figure_comparison(rows):
    """Test accuracy vs step (linear) and vs cumulative MB all-reduced (log axis, so the
    step-0 evaluation at 0 bytes is left out of that panel rather than drawn as a segment);
    seed means, min-max bands; one legend under both."""
    fig, axes = new_figure(12, 5.4, 1, 2)
    a, b = axes[0]
    lines = accuracy_panel(a, rows)
    accuracy_panel(b, rows, "bytes_allreduced", unit=1e6, after_first_sync=True)
    a.set(xlabel="step", ylabel="test accuracy (evaluated model)", title="accuracy vs step")
    b.set(xlabel="MB all-reduced per replica (log; seed mean)", ylabel="test accuracy",
          title="accuracy vs communication (after the first sync)")
    b.set_xscale("log")
    fig.suptitle(wrapped(setting(rows[0]), fig, 10), fontsize=10)
    _row_legend(fig, rows, lines)
    return fig


def plot_comparison(rows, path: Path) -> None:
    save(figure_comparison(rows), path)
