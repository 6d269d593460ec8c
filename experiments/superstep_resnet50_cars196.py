"""Superstep aggregation study (student slides): ResNet-50 on Stanford Cars, 8 replicas.

Replicas train on disjoint shards and synchronise every E epochs (E = 30, 10, 5, 3 of a
30-epoch run) with the aggregate max, min, median or mean of their parameters. The slides
report all aggregators fitting alike, more syncs approaching serial accuracy, and 8 GPUs
3.73x faster than 1. Pick one cell of the grid with `--opt epochs=E --opt aggregator=A`;
`--grid` runs all 16 and BSP (serial SGD at the global batch: the accuracy more syncs
approach and the time they are measured against). Assumed: SGD lr 0.01, momentum 0.9,
batch 32 per replica, 224x224.

With `--grid`, the script prints the grid as a table and, with `--out`, writes it as
`grid.json` and `grid.png`: final test accuracy, test loss and train loss over aggregator x
sync period, and each cell's speedup over BSP, projected by the cost model
(`projected_time_s`, the run's sync pattern on `project_network`) and measured here
(`wall_time_s`).
"""
import dataclasses
import json
import math
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments._runner import Experiment, config, parser, steps_for, train_all
from jaxsel import TrainConfig

PERIODS = (30, 10, 5, 3)
AGGREGATORS = ("max", "min", "median", "mean")


def full(data_dir=None) -> TrainConfig:
    return TrainConfig(dataset="cars196", data_dir=data_dir, model="resnet50", strategy="superstep",
                       strategy_options={"epochs": 10, "aggregator": "mean"}, replicas=8,
                       batch_size=32, steps=steps_for(30, 8_144, 32, replicas=8), optimizer="sgd",
                       lr=0.01, momentum=0.9, weight_decay=1e-4, partition="disjoint",
                       eval_every=steps_for(1, 8_144, 32, replicas=8), log_every=10,
                       loader_workers=8, prefetch=4)


def tiny(data_dir=None) -> TrainConfig:
    """mnist1d and the MLP, 4 replicas on disjoint shards, a median superstep every
    quarter epoch (a 60-step run then syncs four times)."""
    return TrainConfig(dataset="mnist1d", data_dir=data_dir, model="mlp", strategy="superstep",
                       strategy_options={"epochs": 0.25, "aggregator": "median"}, replicas=4,
                       batch_size=16, steps=60, optimizer="sgd", lr=0.05, momentum=0.9,
                       partition="disjoint", eval_every=60, log_every=10)


def grid(base: TrainConfig, tiny: bool = False, periods=PERIODS, aggregators=AGGREGATORS) -> list[TrainConfig]:
    """The slides' runs, every sync period (epochs, of a 30-epoch run) x every aggregator,
    then BSP. Tiny runs last about one epoch instead of 30, so their periods shrink by the
    same factor. BSP runs last because the first run in a process also pays one-time
    warm-up in its measured time, and BSP is what every time is divided by."""
    scale = 1 / 30 if tiny else 1.0
    cells = [dataclasses.replace(base, strategy="superstep", strategy_options={"epochs": e * scale, "aggregator": a})
             for e in periods for a in aggregators]
    return [*cells, dataclasses.replace(base, strategy="bsp", strategy_options={})]


def grid_rows(results) -> list[dict]:
    """One row per run (BSP first): its cell and final figures, times relative to BSP's."""
    bsp = next(r.final for r in results if r.config.strategy == "bsp")
    speedup = lambda key, f: bsp[key] / f[key] if f[key] > 0 else math.nan
    rows = []
    for r in sorted(results, key=lambda r: r.config.strategy != "bsp"):
        f, opts = r.final, r.config.strategy_options
        cell = r.config.strategy == "superstep"
        rows.append({"strategy": r.config.strategy, "aggregator": opts["aggregator"] if cell else None,
                     "epochs": float(opts["epochs"]) if cell else None,
                     "label": f"{opts['aggregator']} every {opts['epochs']:.3g} ep" if cell else "bsp (serial)",
                     "test_accuracy": f["final_test_accuracy"], "test_loss": f["final_test_loss"],
                     "train_loss": f["final_train_loss"], "sync_fraction": f["sync_fraction"],
                     "projected_time_s": f["projected_time_s"], "projected_speedup": speedup("projected_time_s", f),
                     "wall_time_s": f["wall_time_s"], "wall_speedup": speedup("wall_time_s", f),
                     "out_dir": r.config.out_dir})
    return rows


def format_table(rows: list[dict]) -> str:
    """The grid as text; speedups are BSP's time / the run's (> 1: faster than BSP)."""
    w = max(len(r["label"]) for r in rows)
    head = (f"{'run':<{w}} {'test acc':>8} {'test loss':>9} {'train loss':>10} {'sync frac':>9} "
            f"{'proj s':>9} {'proj x':>7} {'wall s':>8} {'wall x':>7}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['label']:<{w}} {r['test_accuracy']:>8.4f} {r['test_loss']:>9.4f} {r['train_loss']:>10.4f} "
                     f"{r['sync_fraction']:>9.3f} {r['projected_time_s']:>9.2f} {r['projected_speedup']:>7.2f} "
                     f"{r['wall_time_s']:>8.2f} {r['wall_speedup']:>7.2f}")
    return "\n".join(lines)


def plot_grid(rows: list[dict], path: Path, title: str = "") -> None:
    """Heatmaps over aggregator (rows) x sync period (columns, longest first) of the final
    figures and of the speedup over BSP, plus accuracy against projected speedup; BSP's
    own values are in the titles and the scatter."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    bsp = next(r for r in rows if r["strategy"] == "bsp")
    cells = [r for r in rows if r["strategy"] == "superstep"]
    aggs = list(dict.fromkeys(r["aggregator"] for r in cells))
    periods = sorted({r["epochs"] for r in cells}, reverse=True)
    panels = [("test_accuracy", "final test accuracy", "viridis", ".3f"),
              ("test_loss", "final test loss", "viridis_r", ".3f"),
              ("train_loss", "final train loss", "viridis_r", ".3f"),
              ("projected_speedup", "projected speedup over BSP", "viridis", ".2f"),
              ("wall_speedup", "measured speedup over BSP", "viridis", ".2f")]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    for ax, (key, name, cmap, fmt) in zip(axes.flat, panels):
        m = np.full((len(aggs), len(periods)), np.nan)
        for r in cells:
            m[aggs.index(r["aggregator"]), periods.index(r["epochs"])] = r[key]
        im = ax.imshow(m, cmap=cmap, aspect="auto")
        fig.colorbar(im, ax=ax, shrink=0.85)
        lo, hi = np.nanmin(m), np.nanmax(m)
        for (i, j), v in np.ndenumerate(m):
            dark = cmap.endswith("_r") == ((v - lo) > 0.5 * (hi - lo))
            ax.text(j, i, format(v, fmt), ha="center", va="center", color="white" if dark else "black")
        ax.set_xticks(range(len(periods)), [f"{e:.3g}" for e in periods])
        ax.set_yticks(range(len(aggs)), aggs)
        ax.set(xlabel="sync every E epochs", ylabel="aggregator",
               title=f"{name}\n(BSP: {format(bsp[key], fmt)})")
    ax = axes.flat[-1]
    for agg in aggs:
        pts = [r for r in cells if r["aggregator"] == agg]
        ax.scatter([r["projected_speedup"] for r in pts], [r["test_accuracy"] for r in pts], label=agg)
    ax.scatter([1.0], [bsp["test_accuracy"]], marker="*", s=160, color="black", label="BSP")
    ax.set(xlabel="projected speedup over BSP", ylabel="final test accuracy", title="accuracy vs projected time")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _names(text: str | None, cast, default) -> tuple:
    return tuple(cast(v) for v in text.split(",")) if text else default


def main(exp: Experiment | None = None, argv: list[str] | None = None):
    """The shared command line plus the sweep's summary (and `--periods`, `--aggregators`
    to run part of it); returns the last RunResult."""
    exp = exp or EXPERIMENT
    p = parser(exp)
    p.add_argument("--periods", default=None, metavar="E,E,...",
                   help=f"--grid: sync periods in epochs of the 30-epoch run (default {','.join(map(str, PERIODS))})")
    p.add_argument("--aggregators", default=None, metavar="A,A,...",
                   help=f"--grid: aggregators (default {','.join(AGGREGATORS)})")
    args = p.parse_args(argv)
    if not args.grid:
        if args.periods or args.aggregators:
            p.error("--periods and --aggregators choose cells of --grid")
        return train_all(exp, args, [config(exp, args)])[-1]
    if "strategy" in args.typed:   # a typed --strategy (the parser gives every flag a default)
        p.error("--grid runs its own strategies (BSP and the superstep cells); drop --strategy")
    cfg = config(exp, args)
    periods, aggregators = _names(args.periods, float, PERIODS), _names(args.aggregators, str, AGGREGATORS)
    results = train_all(exp, args, grid(cfg, args.tiny, periods, aggregators))
    rows = grid_rows(results)
    print(format_table(rows), flush=True)
    if cfg.out_dir:
        out = Path(cfg.out_dir)
        (out / "grid.json").write_text(json.dumps(rows, indent=2))
        title = (f"{cfg.dataset} / {cfg.model}, {cfg.replicas} replicas x batch {cfg.batch_size}, {cfg.steps} steps; "
                 f"projected on {cfg.project_network}")
        plot_grid(rows, out / "grid.png", title)
        print(f"wrote {out / 'grid.json'} and {out / 'grid.png'}", flush=True)
    return results[-1]


EXPERIMENT = Experiment("superstep_resnet50_cars196", __doc__.split("\n\n")[0], full, tiny,
                        baselines=("bsp", "localsgd"), grid=grid)

if __name__ == "__main__":
    main(EXPERIMENT)
