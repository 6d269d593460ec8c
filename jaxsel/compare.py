"""`jaxsel compare`: train several strategies on the same data and seed, side by side.

Writes results.json (one object per strategy), per-strategy metrics, and a plot of test
accuracy against step and against bytes all-reduced.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from .config import TrainConfig
from .runlog import jsonable
from .train import RunResult, train

RESULT_KEYS = ("strategy", "final_test_accuracy", "sync_fraction", "bytes_allreduced", "wall_time_s")


def compare(base: TrainConfig, strategies: list[str], out_dir: str | Path) -> list[dict]:
    """Run each strategy with `base`'s settings; return the rows written to results.json."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs: list[RunResult] = []
    for name in strategies:
        cfg = dataclasses.replace(base, strategy=name, out_dir=str(out / name))
        runs.append(train(cfg))
    rows = [{**{k: r.final[k] for k in RESULT_KEYS}, "strategy": r.config.strategy,
             "final_test_loss": r.final["final_test_loss"], "steps": r.final["steps"],
             "replicas": r.final["replicas"], "layout": r.final["layout"], "label": r.final["strategy"]}
            for r in runs]
    (out / "results.json").write_text(json.dumps(jsonable(rows), indent=2))
    plot_comparison(runs, out / "comparison.png")
    return rows


def format_table(rows: list[dict]) -> str:
    w = max([8] + [len(r.get("label", r["strategy"])) for r in rows])
    head = f"{'strategy':<{w}} {'test acc':>9} {'sync frac':>9} {'MB all-reduced':>15} {'wall s':>8}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r.get('label', r['strategy']):<{w}} {r['final_test_accuracy']:>9.4f} {r['sync_fraction']:>9.3f} "
            f"{r['bytes_allreduced'] / 1e6:>15.2f} {r['wall_time_s']:>8.2f}"
        )
    return "\n".join(lines)


def plot_comparison(runs: list[RunResult], path: Path) -> None:
    """Test accuracy vs step and vs cumulative bytes all-reduced, one line per strategy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    for r in runs:
        steps = [e["step"] for e in r.evals]
        acc = [e["test_accuracy"] for e in r.evals]
        mb = [e["bytes_allreduced"] / 1e6 for e in r.evals]
        a.plot(steps, acc, marker=".", label=r.final["strategy"])
        b.plot(mb, acc, marker=".", label=r.final["strategy"])
    a.set(xlabel="step", ylabel="test accuracy (consensus model)", title="accuracy vs step")
    b.set(xlabel="MB all-reduced per replica", ylabel="test accuracy", title="accuracy vs communication")
    b.set_xscale("symlog", linthresh=1.0)
    for ax in (a, b):
        ax.grid(alpha=0.3)
        ax.legend()
    cfg = runs[0].config
    fig.suptitle(f"{cfg.dataset} / {cfg.model}, {cfg.replicas} replicas x batch {cfg.batch_size}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
