"""Sync-Switch (Li et al., ICDCS'21): ResNet-32 on CIFAR-10, 8 workers.

Offline policy: BSP for the first 5 % of training, then the asynchronous protocol
(jaxsel emulates ASP's staleness in lock-step, s = N - 1). Paper: 91.7 % vs BSP's 92.0 %
at 5.1x BSP's speed; up to 5.13x throughput overall. Settings assumed from the He et al.
CIFAR recipe: SGD lr 0.1, momentum 0.9, weight decay 1e-4, batch 128 per worker, disjoint
shards, 8000 steps (~164 epochs at the global batch of 1024), constant rate.

`--search` runs the paper's offline policy search instead of one run: train BSP, then
binary-search the smallest BSP fraction whose final test accuracy stays within
`--tolerance` of BSP's (jaxsel.analysis.syncswitch_search), one full run per probe.
"""
import dataclasses
import json
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments._runner import Experiment, config, parser, train_all
from jaxsel import TrainConfig
from jaxsel.analysis.syncswitch_search import search_bsp_fraction
from jaxsel.core.parallel import request_cpu_devices


def full(data_dir=None) -> TrainConfig:
    return TrainConfig(dataset="cifar10", data_dir=data_dir, model="resnet32", strategy="syncswitch",
                       strategy_options={"policy": "offline", "bsp_fraction": 0.05}, replicas=8,
                       batch_size=128, steps=8_000, optimizer="sgd", lr=0.1, momentum=0.9,
                       weight_decay=1e-4, partition="disjoint", eval_every=250, log_every=50)


def tiny(data_dir=None) -> TrainConfig:
    """digits and the small CNN, 4 replicas; BSP for the first quarter."""
    return TrainConfig(dataset="digits", data_dir=data_dir, model="cnn", strategy="syncswitch",
                       strategy_options={"policy": "offline", "bsp_fraction": 0.25}, replicas=4,
                       batch_size=16, steps=60, optimizer="sgd", lr=0.05, momentum=0.9,
                       weight_decay=1e-4, partition="disjoint", eval_every=60, log_every=10)


EXPERIMENT = Experiment("syncswitch_resnet32_cifar10", __doc__.split("\n\n")[0], full, tiny,
                        baselines=("bsp", "asp"))


def search(exp: Experiment, cfg: TrainConfig, tolerance: float, resolution: float) -> dict:
    """The offline policy search on `cfg`: prints each probe as it finishes and returns the
    probes and the choice (also written to `<out>/search.json`, each probe's run to
    `<out>/bsp_fraction_<f>`). BSP (fraction 1) is trained first, so every later probe
    can be judged against the target when it is printed."""
    if cfg.strategy != "syncswitch":
        raise SystemExit(f"{exp.name}: --search tunes Sync-Switch's switch point; drop --strategy {cfg.strategy}")
    options = {k: v for k, v in cfg.strategy_options.items() if k not in ("switch_step", "bsp_fraction")}
    if options.setdefault("policy", "offline") != "offline":
        raise SystemExit(f"{exp.name}: --search tunes the offline policy, got --opt policy={options['policy']}")
    request_cpu_devices(max(8, cfg.replicas))
    from jaxsel import train

    out = Path(cfg.out_dir) if cfg.out_dir else None
    print(f"{exp.name}: offline policy search over BSP fractions (step {resolution:g}), tolerance "
          f"{tolerance:g} below BSP; {cfg.model} on {cfg.dataset}, {cfg.replicas} replicas x batch "
          f"{cfg.batch_size}, {cfg.steps} steps", flush=True)
    probes: list[dict] = []
    target = None

    def train_fn(fraction: float) -> float:
        run = dataclasses.replace(cfg, strategy_options={**options, "bsp_fraction": fraction},
                                  out_dir=str(out / f"bsp_fraction_{fraction:.4f}") if out else None)
        f = train(run).final
        acc = float(f["final_test_accuracy"])
        verdict = "reference" if target is None else ("kept" if acc >= target else "rejected")
        probes.append({"fraction": fraction, "switch_step": round(fraction * cfg.steps),
                       "test_accuracy": acc, "test_loss": f["final_test_loss"], "verdict": verdict,
                       "wall_time_s": f["wall_time_s"], "projected_time_s": f["projected_time_s"]})
        p = probes[-1]
        print(f"probe {len(probes)}: BSP fraction {fraction:.4f} (switch at step {p['switch_step']}/{cfg.steps})"
              f"  test accuracy {acc:.4f}  {verdict}" + ("" if target is None else f" (target {target:.4f})"),
              flush=True)
        return acc

    reference = train_fn(1.0)
    target = reference - tolerance
    found = search_bsp_fraction(train_fn, tolerance, resolution=resolution, reference_accuracy=reference)
    chosen = next(p for p in probes if p["fraction"] == found.fraction)
    print(f"chosen BSP fraction: {found.fraction:.4f} (switch at step {chosen['switch_step']}/{cfg.steps}): "
          f"test accuracy {found.accuracy:.4f} vs BSP's {reference:.4f}, projected time "
          f"{chosen['projected_time_s'] / probes[0]['projected_time_s']:.2f}x BSP's ({cfg.project_network}); "
          f"{len(probes)} runs", flush=True)
    summary = {"tolerance": tolerance, "resolution": resolution, "steps": cfg.steps, "replicas": cfg.replicas,
               "reference_accuracy": reference, "target_accuracy": target, "fraction": found.fraction,
               "accuracy": found.accuracy, "switch_step": chosen["switch_step"], "probes": probes}
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / "search.json").write_text(json.dumps(summary, indent=2))
    return summary


def main(exp: Experiment | None = None, argv: list[str] | None = None):
    """The shared command line plus `--search`; returns the last RunResult, or the search's
    summary dict with `--search`."""
    exp = exp or EXPERIMENT
    p = parser(exp)
    p.add_argument("--search", action="store_true",
                   help="binary-search the smallest BSP fraction that keeps BSP's accuracy (one run per probe)")
    p.add_argument("--tolerance", type=float, default=0.005,
                   help="--search: accepted drop in final test accuracy below BSP's (default 0.005)")
    p.add_argument("--resolution", type=float, default=None,
                   help="--search: fractions probed are multiples of this (default 1/64, --tiny 1/8)")
    args = p.parse_args(argv)
    cfg = config(exp, args)
    if not args.search:
        return train_all(exp, args, [cfg])[-1]
    resolution = args.resolution if args.resolution is not None else (1 / 8 if args.tiny else 1 / 64)
    if not 0.0 < resolution <= 1.0 or not args.tolerance >= 0.0:   # before BSP's run, not after it
        p.error(f"--search needs 0 < --resolution <= 1 and --tolerance >= 0, got {resolution}, {args.tolerance}")
    return search(exp, cfg, args.tolerance, resolution)


if __name__ == "__main__":
    main(EXPERIMENT)
