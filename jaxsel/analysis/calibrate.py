"""`jaxsel calibrate`: which delta means what on this task, for each of SelSync's statistics.

A delta cannot be carried over from a paper: Delta_bar's scale depends on the model, the
optimizer, the data and the statistic (`core.triggers.Significance`: "raw" measures the
gradient norm's step-to-step noise, "smoothed" the change of its W-step average, some ten
times smaller). So a short BSP probe runs on the task (the cells of a `jaxsel compare`
job, bit for bit: OUT/bsp/seed<S>/, resumable), its runs' recorded gradient norms s_t
(each replica's, every step) give Delta_bar under both statistics
(`significance_stats.decisions`, the host implementation tested equal to the device
trigger), and for each statistic the command reports the delta that fires on 5, 10, 25 and
50 % of the steps after the warm-up, the distribution (median, p90, max), and the share
of steps a given delta (the authors' 0.3 by default) fires on. calibration.json holds it
all, calibration.png draws it.

On BSP's trajectory the replicas never drift apart, and every sync of a SelSync run changes
its trajectory: the figures say where a delta sits on this task, not what a run at it
will do.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from ..core.triggers import STATISTICS
from ..training.config import TrainConfig
from ..training.job_builds import one_job
from ..training.rundir import CALIBRATION_PICTURE, METRICS_FILE
from ..training.rundir.lock import DirectoryLock
from ..training.rundir.job_files import CALIBRATION, write_job_file
from . import job
from .cells import Cells, row_config
from .progress import Progress
from .seed_grid import seed_range
from .significance_stats import (FRACTIONS, decisions, fraction_deltas, recorded_grad_norms, summary,
                                 sync_fraction)
from .task_setting import TaskSetting
from .variants import parse_entry

#: the probe's method (its runs are compare's cells of it)
PROBE = "bsp"
FILES = (CALIBRATION.name, CALIBRATION_PICTURE)


@dataclasses.dataclass(frozen=True)
class Significance:
    """The significance test's options the figures are for (SelSync's defaults unless given);
    `warmup` None: each statistic's own (W-1 raw, 2W-1 smoothed); `delta`: the one whose
    firing share is reported and drawn."""

    window: int = 25
    alpha: float = 0.01
    warmup: int | None = None
    delta: float = 0.3

    def __post_init__(self):
        from ..core.triggers import Significance as Trigger

        Trigger(delta=self.delta, window=self.window, alpha=self.alpha, warmup=self.warmup)   # the trigger's checks


def statistic_figures(traces: list[np.ndarray], seeds: list[int], sig: Significance, statistic: str) -> dict:
    """One statistic's figures over the probe's seeds (the seeds' post-warm-up steps pooled)."""
    per_seed = [decisions(s, sig.window, sig.alpha, statistic, sig.warmup) for s in traces]
    pooled = np.concatenate([d.decided for d in per_seed])
    return {"warmup": per_seed[0].warmup, "steps": int(len(pooled)), **summary(pooled),
            "fires": {f"{f:g}": d for f, d in fraction_deltas(pooled, FRACTIONS).items()},
            "fraction_at_delta": sync_fraction(pooled, sig.delta),
            "per_seed": [{"seed": seed, **summary(d.decided), "fraction_at_delta": sync_fraction(d.decided, sig.delta)}
                         for seed, d in zip(seeds, per_seed)],
            "values": [d.value.tolist() for d in per_seed]}


def calibration(traces: list[np.ndarray], seeds: list[int], sig: Significance) -> dict:
    """Both statistics' figures from the probe's gradient-norm traces."""
    return {"window": sig.window, "alpha": sig.alpha, "warmup": sig.warmup, "delta": sig.delta, "seeds": seeds,
            "statistics": {st: statistic_figures(traces, seeds, sig, st) for st in STATISTICS}}


def setting_line(task: TaskSetting, seeds: list[int]) -> str:
    """calibration.json's "setting": the probe's task and its seeds."""
    over = f"seeds {seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else f"seed {seeds[0]}"
    return f"{task.head}, {task.shards}, {task.steps} steps of BSP, {task.schedule}, {over}"


def probe_configs(base: TrainConfig, out: Path, seeds: int) -> list[TrainConfig]:
    variant = parse_entry(PROBE)
    return [row_config(dataclasses.replace(base, strategy_options={}), variant, str(out / PROBE / f"seed{s}"), s)
            for s in seed_range(base.optim, seeds)]


def held(out: Path) -> list[str]:
    files = [out / name for name in FILES]
    return [str(p.relative_to(out)) for p in [*files, *sorted(out.glob(f"*/seed*/{METRICS_FILE}"))] if p.is_file()]


@one_job()   # each cell's strategy and layout built once (training/job_builds.py)
def run_calibration(base: TrainConfig, out_dir: str | Path, sig: Significance, *, seeds: int = 1,
                    resume: bool = False, announce=None, on_start=None) -> dict:
    """Run (or, `resume`, finish) the probe in `out_dir` and write its files; returns
    calibration.json's content."""
    out = Path(out_dir)
    configs = probe_configs(base, out, seeds)
    lock = DirectoryLock(out, "calibration directory").acquire()
    try:
        settings = {"base": job.settings_of(base), "seeds": seeds, "significance": dataclasses.asdict(sig)}
        job.begin(out, "calibrate", settings, resume=resume, held=held(out))
        if on_start is not None:
            on_start()
        cells = Cells(out, Progress(seeds, announce))
        seed_list = seed_range(base.optim, seeds)   # each config's seed (`probe_configs`)
        runs = [cells.get(cfg, f"{PROBE}, seed {s}") for cfg, s in zip(configs, seed_list)]
        result = {"setting": setting_line(TaskSetting.of(base.data, base.optim, base.placement), seed_list),
                  **calibration([recorded_grad_norms(r.records) for r in runs], seed_list, sig)}
        write_job_file(out, CALIBRATION, result)
        plot_calibration(result, out / CALIBRATION_PICTURE)
    finally:
        lock.release()
    return result


def format_calibration(result: dict) -> str:
    """The table `jaxsel calibrate` prints."""
    d = result["delta"]
    head = (f"{'statistic':<9} {'warm-up':>7} {'median':>8} {'p90':>8} {'max':>8}   "
            + "".join(f"{'fires ' + format(float(f), '.0%'):>11}" for f in result["statistics"]["raw"]["fires"])
            + f"   {'at delta=' + format(d, 'g'):>12}")
    lines = [_wrap(f"Delta_bar on BSP's trajectory ({result['setting']}; W={result['window']}, "
                   f"alpha={result['alpha']:g}): per step after the warm-up, the largest over the replicas (any vote "
                   f"syncs)"), head, "-" * len(head)]
    for name, st in result["statistics"].items():
        fires = "".join(f"{_g(v):>11}" for v in st["fires"].values())
        lines.append(f"{name:<9} {st['warmup']:>7} {_g(st['median']):>8} {_g(st['p90']):>8} {_g(st['max']):>8}   "
                     f"{fires}   {format(st['fraction_at_delta'], '.1%'):>12}")
    lines.append(_wrap("'fires X': the delta at which X of these steps would have synced; 'at delta': the share "
                       "that delta fires on. On BSP's trajectory: a run at that delta syncs less, drifts, and sees "
                       "other values."))
    return "\n".join(lines)


def _wrap(text: str) -> str:
    """A sentence of the table wrapped as the comparison's are (it ran to 240 columns)."""
    import textwrap

    from .compare_table import TEXT_WIDTH

    return textwrap.fill(text, TEXT_WIDTH, break_on_hyphens=False, break_long_words=False)


def _plain_log_ticks(ax, ticker) -> None:
    """Tick labels as plain numbers (0.02, 0.3); across more than a decade only the minor
    ticks at 2, 3 and 5 x 10^k are labelled, so that they do not overlap."""
    low, high = ax.get_xlim()
    wide = high / low > 10

    def minor(x, _):
        mantissa = round(x / 10 ** np.floor(np.log10(x) + 1e-9))
        return f"{x:g}" if not wide or mantissa in (2, 3, 5) else ""

    ax.xaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
    ax.xaxis.set_minor_formatter(ticker.FuncFormatter(minor))
    ax.tick_params(axis="x", which="minor", labelsize=7)


def _g(value) -> str:
    return "-" if value is None else f"{value:.3g}"


def plot_calibration(result: dict, path: Path) -> None:
    """One panel per statistic: the share of post-warm-up steps that a delta fires on
    (log delta), the deltas of 5/10/25/50 % marked, and `delta`."""
    from matplotlib import ticker

    from .plots import pyplot

    plt = pyplot()
    stats = result["statistics"]
    fig, axes = plt.subplots(1, len(stats), figsize=(5.2 * len(stats), 4.2), squeeze=False)
    for ax, (name, st) in zip(axes[0], stats.items()):
        values = np.sort(np.concatenate([np.asarray(v, float)[st["warmup"]:] for v in st["values"]]))
        values = values[values > 0]
        if len(values):
            share = 1.0 - np.arange(len(values)) / len(values)   # the share of steps >= each value
            ax.step(values, share, where="post", color="C0", label="share of steps with Delta_bar >= delta")
        for color, (f, delta) in zip(("C1", "C2", "C4", "C5"), st["fires"].items()):
            ax.axvline(delta, color=color, ls=":", lw=1.2, label=f"fires on {float(f):.0%}: delta = {delta:.3g}")
        ax.axvline(result["delta"], color="C3", ls="--", lw=1.5,
                   label=f"delta = {result['delta']:g}: fires on {st['fraction_at_delta']:.1%}")
        ax.set(xscale="log", ylim=(0, 1.02), xlabel="delta (log)", ylabel="share of post-warm-up steps synced",
               title=f"statistic={name} (median {_g(st['median'])}, p90 {_g(st['p90'])}, max {_g(st['max'])})")
        _plain_log_ticks(ax, ticker)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7, loc="best")
    fig.suptitle(f"Delta_bar on BSP's trajectory, W={result['window']}, alpha={result['alpha']:g}\n"
                 f"{result['setting']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
