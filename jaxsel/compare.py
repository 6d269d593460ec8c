"""`jaxsel compare`: train several strategies on the same data and seed, side by side.

Writes results.json (one row per strategy: final accuracy, communication, and
time-to-accuracy against a target), per-strategy run dirs (metrics.jsonl, evals.json),
and four pictures: comparison.png (accuracy against step and against bytes),
accuracy_vs_time.png (against projected wall-clock), sync_timeline.png (which steps
synchronized, SelSync's Delta_bar against delta) and divergence.png.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from .config import TrainConfig
from .numbers import significant
from .plots import LEGEND_NOTE, plot_accuracy_vs_time, plot_comparison, plot_divergence, plot_sync_timeline
from .runlog import jsonable, projected_cluster
from .significance_reach import after_warmup, quiet_note, significance_options
from .strategy_args import check_options_apply, options_for
from .time_to_accuracy import DEFAULT_TARGET, resolve_target, speedups, time_to_target
from .train import RunResult, train

RESULT_KEYS = ("strategy", "final_test_accuracy", "sync_fraction", "bytes_allreduced", "wall_time_s")
PICTURES = ("comparison.png", "accuracy_vs_time.png", "sync_timeline.png", "divergence.png")


def compare(base: TrainConfig, strategies: list[str], out_dir: str | Path,
            target: str = DEFAULT_TARGET) -> list[dict]:
    """Run each strategy with `base`'s settings; return the rows written to results.json."""
    check_options_apply(strategies, base.strategy_options)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    base = dataclasses.replace(base, run_group=base.run_group or out.name)   # one dashboard group
    runs: list[RunResult] = []
    for name in strategies:
        cfg = dataclasses.replace(base, strategy=name, out_dir=str(out / name),
                                  strategy_options=options_for(name, base.strategy_options))
        runs.append(train(cfg))
    goal = resolve_target(target, {r.config.strategy: r.final["final_test_accuracy"] for r in runs})
    rows = [result_row(r, goal) for r in runs]
    speedups(rows)
    for run, row in zip(runs, rows):
        row.update(significance_row(run))
    (out / "results.json").write_text(json.dumps(jsonable(rows), indent=2))
    write_pictures(runs, goal, network_label(base), out)
    return rows


def result_row(run: RunResult, goal) -> dict:
    f = run.final
    return {**{k: f[k] for k in RESULT_KEYS}, "strategy": run.config.strategy, "label": f["strategy"],
            "final_test_loss": f["final_test_loss"], "steps": f["steps"], "replicas": f["replicas"],
            "layout": f["layout"],
            "projected_time_s": f["projected_time_s"], "project_network": network_label(run.config),
            "target_accuracy": goal.accuracy, "target": goal.description,
            **time_to_target(run.evals, goal.accuracy)}


def network_label(cfg: TrainConfig) -> str:
    """What the projection ran on, for tables and plots: the --project-network as given,
    or both networks of a two-level cluster."""
    cluster = projected_cluster(cfg)
    return cluster.label(cfg.replicas) if cluster.two_level else cfg.project_network


def significance_row(run: RunResult) -> dict:
    """For a significance-triggered run: its syncs after warm-up, peak Delta_bar, and why
    it stayed quiet (`quiet_note`) when it never synchronized after the warm-up."""
    if not any("delta" in r for r in run.records):
        return {}
    delta, window, alpha = significance_options(run)
    stats = after_warmup(run.records, window)
    return {**stats, "quiet_note": quiet_note(run.final["strategy"], stats, delta, window, alpha)}


def write_pictures(runs: list[RunResult], goal, network: str, out: Path) -> None:
    plot_comparison(runs, out / "comparison.png")
    plot_accuracy_vs_time(runs, goal, network, out / "accuracy_vs_time.png")
    plot_sync_timeline(runs, out / "sync_timeline.png")
    plot_divergence(runs, out / "divergence.png")


COLUMNS = (  # header, width, value of a row
    ("test acc", 8, lambda r: significant(r["final_test_accuracy"])),
    ("sync frac", 9, lambda r: significant(r["sync_fraction"])),
    ("MB sent", 8, lambda r: significant(r["bytes_allreduced"] / 1e6)),
    ("wall s", 7, lambda r: significant(r["wall_time_s"])),
    ("steps>tgt", 9, lambda r: significant(r.get("steps_to_target"), missing="never")),
    ("MB>tgt", 7, lambda r: significant(_mb(r.get("bytes_to_target")), missing="never")),
    ("proj s>tgt", 10, lambda r: significant(r.get("time_to_target_s"), missing="never")),
    ("vs BSP", 7, lambda r: _speedup(r)),
)


def _mb(nbytes):
    return None if nbytes is None else nbytes / 1e6


def _speedup(row: dict) -> str:
    if row.get("speedup_vs_bsp") is not None:
        return significant(row["speedup_vs_bsp"]) + "x"
    return "never" if row.get("reached_target") is False else "-"


def format_table(rows: list[dict]) -> str:
    """The comparison as text: 4 significant digits; '>tgt' columns are to the target."""
    w = max([8] + [len(r.get("label", r["strategy"])) for r in rows])
    head = f"{'strategy':<{w}}" + "".join(f" {h:>{n}}" for h, n, _ in COLUMNS)
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r.get('label', r['strategy']):<{w}}" + "".join(f" {fn(r):>{n}}" for _, n, fn in COLUMNS))
    if rows and "target" in rows[0]:
        net = rows[0].get("project_network", "?")
        lines.append(f"target: {rows[0]['target']}; '>tgt': to the first evaluation at the target; "
                     f"proj s: projected wall-clock on {net} (compute measured here); vs BSP: BSP's "
                     f"projected time to target over the row's; MB sent: per replica; {LEGEND_NOTE}")
    lines += [f"note: {r['quiet_note']}" for r in rows if r.get("quiet_note")]
    return "\n".join(lines)
