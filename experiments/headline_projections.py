"""The papers' headline comparisons, projected with jaxsel.costmodel.

SelSync vs BSP time-to-accuracy (paper: up to 14x), Sync-Switch vs BSP throughput (paper:
up to 5.13x) and SSD-SGD vs BSP (paper: up to 110 % faster), for a ResNet-101-sized model
on 10 workers over 10 GbE. Nothing here runs on a cluster: the *sync pattern* and the
*accuracy curve* come from real jaxsel runs (embedded `digits`, MLP, 10 simulated CPU
devices), the *payload* is our ResNet-101's exact parameter bytes, the *compute time per
step* is either measured (one ResNet-101 step on this CPU) or a stated GPU-class
assumption (our model's XLA FLOP count over an assumed effective FLOP rate), and the
network and stragglers are the cost model's stated presets. Every figure is written out
with the assumptions it rests on.

A second table projects onto a two-level cluster (default 4 hosts x 8 GPUs, NVLink inside,
10 GbE between): BSP (hierarchical all-reduce every step), SelSync, and "BSP inside 8-GPU
hosts, SelSync across 10 GbE": a real Hierarchical(inner=BSP(), outer=SelSync(...)) run
with 2 replica groups, its own sync pattern and accuracy curve.

    python experiments/headline_projections.py                 # ~3-5 min on 2 CPU cores
    python experiments/headline_projections.py --quick         # CI-size smoke run, < 60 s
    python experiments/headline_projections.py --gpu-step-s 0.15 --network 1gbe
    python experiments/headline_projections.py --hosts 2 --gpus-per-host 4 --intra-network pcie
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import textwrap
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `jaxsel` importable from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PAPER_CLAIMS = {
    "selsync_vs_bsp": "up to 14x less training time to BSP's accuracy (ResNet-101/CIFAR-10, 10 workers)",
    "syncswitch_vs_bsp": "up to 5.13x throughput, similar converged accuracy",
    "ssdsgd_vs_bsp": "up to 110% faster (2.1x) with good accuracy",
}
#: Straggler models the Sync-Switch pair is projected under (its gain depends on them).
SYNCSWITCH_STRAGGLERS = ("none", "fixed:factor=2,replicas=0", "transient:probability=0.02,factor=4")
SENSITIVITY_NETWORKS = ("1gbe", "10gbe", "25gbe")
#: The two-level cluster table's methods: (key, label), each a real run of the same key.
CLUSTER_METHODS = (("bsp", "BSP (hierarchical all-reduce every step)"), ("selsync", "SelSync"),
                   ("hierarchical", "BSP inside {per_host}-GPU hosts, SelSync across {inter}"))
TARGET_FRACTIONS = (0.95, 0.98, 1.0)
#: Replica groups of the Hierarchical(BSP, SelSync) run: they must divide --replicas.
HIER_GROUPS = 2


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="smoke-test size: 100 steps, SelSync window 10, no CPU ResNet-101 timing")
    p.add_argument("--out", default="runs/headline-projections", help="where results.json and the PNG go")
    p.add_argument("--replicas", type=int, default=10, help="workers (the SelSync paper's 10)")
    p.add_argument("--steps", type=int, default=None, help="training steps per run (default 600, quick 100)")
    p.add_argument("--network", default="10gbe",
                   help="costmodel network preset for the headline rows (between hosts in the cluster table)")
    p.add_argument("--hosts", type=int, default=4, help="hosts of the two-level cluster table")
    p.add_argument("--gpus-per-host", type=int, default=8, help="GPUs (replicas) per host of the cluster table")
    p.add_argument("--intra-network", default="nvlink", help="network inside a host of the cluster table")
    p.add_argument("--batch", type=int, default=32,
                   help="per-worker batch of the projected ResNet-101 step (SelSync paper: 32)")
    p.add_argument("--gpu-step-s", type=float, default=None,
                   help="GPU-class compute seconds per step; default: FLOPs / --gpu-tflops")
    p.add_argument("--gpu-tflops", type=float, default=7.0,
                   help="assumed effective FP32 TFLOP/s of a V100-class GPU (~45%% of its 15.7 peak)")
    p.add_argument("--cpu-batch", type=int, default=2, help="batch of the measured CPU ResNet-101 step")
    p.add_argument("--cpu-steps", type=int, default=3, help="timed CPU steps (after one warm-up)")
    p.add_argument("--target-frac", type=float, default=0.98,
                   help="time-to-accuracy target = this x the pair's BSP final test accuracy")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.steps is None:
        args.steps = 100 if args.quick else 600
    if args.replicas < 2 or args.steps < 20 or not 0 < args.target_frac <= 1:
        p.error("need --replicas >= 2, --steps >= 20 and 0 < --target-frac <= 1")
    if args.hosts < 1 or args.gpus_per_host < 1:
        p.error("need --hosts >= 1 and --gpus-per-host >= 1")
    if args.replicas % HIER_GROUPS or (args.hosts * args.gpus_per_host) % HIER_GROUPS:
        p.error(f"the Hierarchical(BSP, SelSync) run has {HIER_GROUPS} replica groups: --replicas "
                f"({args.replicas}) and --hosts x --gpus-per-host ({args.hosts * args.gpus_per_host}) must be even")
    return args


def ensure_cpu_devices(n: int) -> None:
    """Simulated CPU devices must be requested before JAX starts; a smaller explicit
    JAX_NUM_CPU_DEVICES (e.g. the test suite's 8) cannot run `n` replicas, so raise it."""
    have = os.environ.get("JAX_NUM_CPU_DEVICES")
    if have is None or int(have) < n:
        os.environ["JAX_NUM_CPU_DEVICES"] = str(n)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


# ------------------------------------------------------------------- measurements


def measure_model(name: str, batch: int, cpu_batch: int, cpu_steps: int, time_cpu: bool) -> dict:
    """Parameter bytes and XLA-counted FLOPs of one fwd+bwd step of our `name` on 32x32x3
    inputs (abstract: no weights are materialised), plus, with `time_cpu`, the median
    wall time of that step on this CPU at `cpu_batch` (weights are a constant: the time
    of a dense convnet step does not depend on their values)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    from jaxsel.models import FunctionalModel, build_model, count_params

    shape, classes = (32, 32, 3), 10
    fm = FunctionalModel.from_module(nnx.eval_shape(lambda: build_model(name, shape, classes, seed=0)))
    params = count_params(fm.params)
    nbytes = int(sum(math.prod(x.shape) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(fm.params)))
    loss = fm.classification_loss("image", "label")

    def grad_step(p, s, b):
        if fm.stateful:
            (value, new_state), grads = jax.value_and_grad(loss, has_aux=True)(p, s, b)
            return value, grads, new_state
        return jax.value_and_grad(loss)(p, b)

    def batch_of(n, make):
        return {"image": make((n, *shape), jnp.float32), "label": make((n,), jnp.int32)}

    t0 = time.perf_counter()
    lowered = jax.jit(grad_step).lower(fm.params, fm.model_state, batch_of(batch, jax.ShapeDtypeStruct))
    cost = lowered.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    flops = float(cost["flops"])
    out = {"model": name, "input": "32x32x3, 10 classes (CIFAR stem)", "params": params, "param_bytes": nbytes,
           "flops_per_step": flops, "flops_batch": batch, "lower_s": time.perf_counter() - t0}
    if not time_cpu:
        return out
    def concrete(tree):
        return jax.tree.map(lambda x: jnp.full(x.shape, 0.01, x.dtype), tree)

    p, s = concrete(fm.params), concrete(fm.model_state)
    b = {"image": jnp.full((cpu_batch, *shape), 0.5, jnp.float32), "label": jnp.zeros((cpu_batch,), jnp.int32)}
    t0 = time.perf_counter()
    compiled = jax.jit(grad_step).lower(p, s, b).compile()
    out["cpu_compile_s"] = time.perf_counter() - t0
    jax.block_until_ready(compiled(p, s, b))  # warm-up
    times = []
    for _ in range(cpu_steps):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(p, s, b))
        times.append(time.perf_counter() - t0)
    out.update(cpu_batch=cpu_batch, cpu_step_times_s=times, cpu_step_s=statistics.median(times))
    return out


def train_run(label: str, strategy: str, options: dict, args, **config) -> dict:
    """One real jaxsel run on digits; keeps what the projection needs."""
    from jaxsel import TrainConfig, train

    cfg = TrainConfig(dataset="digits", model="mlp", strategy=strategy, strategy_options=dict(options),
                      replicas=args.replicas, steps=args.steps, batch_size=16, eval_every=args.eval_every,
                      log_every=10, seed=args.seed, progress=False, out_dir=None, **config)
    t0 = time.perf_counter()
    res = train(cfg)
    wall = time.perf_counter() - t0
    timing = res.timing   # what the run's strategy stated, not a second build of it
    records = [{"synced": bool(r["synced"]), "bytes": int(r["bytes_allreduced"]),
                "vote": int(r.get("vote_bytes") or 0), "group": int(r.get("group_bytes") or 0),
                "group_synced": bool(r.get("group_synced", False))} for r in res.records]
    evals = [(int(e["step"]), float(e["test_accuracy"])) for e in res.evals]
    synced = sum(r["synced"] for r in records)
    print(f"  {label:<11} final acc {res.final['final_test_accuracy']:.4f}  sync fraction "
          f"{synced / len(records):.3f}  ({wall:.1f} s)", flush=True)
    return {"label": label, "strategy": strategy, "options": options, "describe": res.final["strategy"],
            "lr": cfg.lr, "momentum": cfg.momentum, "records": records, "evals": evals,
            "final_accuracy": float(res.final["final_test_accuracy"]), "sync_fraction": synced / len(records),
            "background": timing.get("background", "async"), "staleness": timing.get("staleness"),
            "groups": timing.get("groups"), "run_wall_s": wall}


def real_runs(args, window: int, warmup: int) -> dict:
    """Every method's run; the Hierarchical one shares SelSync's settings as its outer level,
    so the cluster table compares the same SelSync with and without BSP inside groups."""
    mom = dict(lr=0.01, momentum=0.9)      # BSP / SelSync / SSD-SGD / Hierarchical
    nomom = dict(lr=0.02, momentum=0.0)    # BSP / Sync-Switch: stale gradients + momentum 0.9 diverge
    selsync = {"delta": 0.3, "window": window, "alpha": 0.01}
    hier = {"inner": "bsp", "outer": "selsync", "groups": HIER_GROUPS, "outer_options": selsync}
    return {
        "bsp": train_run("bsp", "bsp", {}, args, **mom),
        "selsync": train_run("selsync", "selsync", selsync, args, **mom),
        "hierarchical": train_run("hierarchical", "hierarchical", hier, args, **mom),
        "ssdsgd": train_run("ssdsgd", "ssdsgd", {"period": 5, "local_lr_scale": 4.0, "warmup_steps": warmup}, args, **mom),
        "bsp_m0": train_run("bsp (m=0)", "bsp", {}, args, **nomom),
        "syncswitch": train_run("syncswitch", "syncswitch", {"policy": "offline", "bsp_fraction": 0.05},
                                args, **nomom),
    }


def run_summary(run: dict) -> dict:
    """A run for results.json: its per-step records shrunk to the steps that synced (and, for a
    two-level run, each step's group-level bytes) so the sync pattern can be checked."""
    out = {k: v for k, v in run.items() if k != "records"}
    out["synced_steps"] = [i for i, r in enumerate(run["records"]) if r["synced"]]
    if run["groups"] is not None:
        out["group_bytes"] = [r["group"] for r in run["records"]]
    return out


# -------------------------------------------------------------------- projection


def project(run: dict, small_bytes: int, model_bytes: int, compute_s: float, network, replicas: int,
            stragglers, seed: int) -> dict:
    """Replay `run`'s per-step sync pattern with ResNet-101 payloads through the
    cost model (`network`: a preset or a two-level costmodel.Cluster); returns cumulative
    times, the summary and each worker's final clock."""
    from jaxsel import costmodel

    recs = run["records"]
    proj = costmodel.Projector(network, replicas, len(recs), stragglers, seed, background=run["background"],
                               staleness=run["staleness"], groups=run["groups"])
    cumulative = []
    for i, r in enumerate(recs):
        group = r["group"]
        payload = r["bytes"] - r["vote"] - group
        # the MLP moved `payload` = k model-sized trees (grads or params); move k ResNet-101s
        scaled = round(payload / small_bytes * model_bytes)
        cumulative.append(proj.advance(i, r["synced"], scaled, r["vote"], compute_s,
                                       group_payload=round(group / small_bytes * model_bytes),
                                       group_synced=r["group_synced"]))
    summary = proj.summary()
    clocks = [float(c) for c in proj.clock]
    if run["background"] == "overlapped":  # every worker also waits for the last collective
        clocks = [max(c, proj.bg_free) for c in clocks]
    steps = len(recs)
    return {"cumulative": cumulative, "summary": summary, "total_s": summary["total"],
            # workers run at their own pace under ASP: sum each one's steps / its own time
            "steps_per_s": sum(steps / c for c in clocks) if min(clocks) > 0 else float("inf")}


def time_to_accuracy(run: dict, cumulative: list, target: float):
    """(first evaluated step at or above `target`, its projected seconds) or (None, None)."""
    for step, acc in run["evals"]:
        if acc >= target:
            return step, (cumulative[step - 1] if step > 0 else 0.0)
    return None, None


def syncs_until(run: dict, step) -> int | None:
    return None if step is None else sum(r["synced"] for r in run["records"][:step])


def ratio(a, b):
    return None if a is None or b is None or b <= 0 else a / b


def compare(pair: str, base: dict, other: dict, scenario: dict, args, small_bytes: int, model_bytes: int,
            target_frac: float) -> dict:
    """The pair's projected time-to-accuracy and throughput under one scenario."""
    kw = dict(small_bytes=small_bytes, model_bytes=model_bytes, compute_s=scenario["compute_s"],
              network=scenario["network"], replicas=args.replicas, stragglers=scenario["stragglers"],
              seed=args.seed)
    pb, po = project(base, **kw), project(other, **kw)
    target = target_frac * base["final_accuracy"]
    sb, tb = time_to_accuracy(base, pb["cumulative"], target)
    so, to = time_to_accuracy(other, po["cumulative"], target)
    speed = ratio(po["steps_per_s"], pb["steps_per_s"])
    return {
        "pair": pair, **{k: scenario[k] for k in ("compute", "compute_s", "network", "stragglers")},
        "target_accuracy": target, "target_frac": target_frac,
        "bsp_steps_to_target": sb, "other_steps_to_target": so,
        "bsp_syncs_to_target": syncs_until(base, sb), "other_syncs_to_target": syncs_until(other, so),
        "bsp_time_to_target_s": tb, "other_time_to_target_s": to,
        "time_to_accuracy_ratio": ratio(tb, to),
        "bsp_total_s": pb["total_s"], "other_total_s": po["total_s"],
        "throughput_ratio": speed,
        "percent_faster": None if speed is None else 100.0 * (speed - 1.0),
        "bsp_breakdown": {k: pb["summary"][k] for k in ("compute", "communication", "waiting")},
        "other_breakdown": {k: po["summary"][k] for k in ("compute", "communication", "waiting")},
        "network_described": pb["summary"]["network"],
        "curves": {"bsp": [(s, a, pb["cumulative"][s - 1] if s else 0.0) for s, a in base["evals"]],
                   "other": [(s, a, po["cumulative"][s - 1] if s else 0.0) for s, a in other["evals"]]},
    }


# ------------------------------------------------------------ two-level cluster


def cluster_rows(runs: dict, small_bytes: int, model_bytes: int, compute: tuple, args) -> list[dict]:
    """BSP, SelSync and BSP-inside-hosts/SelSync-across on `args.hosts` x `args.gpus_per_host`:
    projected total, time to the target (target_frac x BSP's final accuracy) and the
    speedup over BSP on the same cluster."""
    from jaxsel import costmodel

    cluster = costmodel.Cluster(args.network, args.intra_network, args.gpus_per_host)
    replicas = args.hosts * args.gpus_per_host
    target = args.target_frac * runs["bsp"]["final_accuracy"]
    rows = []
    for key, label in CLUSTER_METHODS:
        run = runs[key]
        p = project(run, small_bytes, model_bytes, compute[1], cluster, replicas, None, args.seed)
        step, tta = time_to_accuracy(run, p["cumulative"], target)
        s = p["summary"]
        rows.append({"method": key, "label": label.format(per_host=args.gpus_per_host, inter=spoken(cluster.inter.name)),
                     "cluster": cluster.describe(replicas), "cluster_label": cluster.label(replicas),
                     "compute": compute[0], "compute_s": compute[1], "target_accuracy": target,
                     "total_s": s["total"], "steps_to_target": step, "time_to_target_s": tta,
                     "syncs": s["syncs"], "group_syncs": s.get("group_syncs", 0),
                     "breakdown": {k: s[k] for k in ("compute", "communication", "waiting")},
                     "group_level": s.get("group_level"), "run_groups": run["groups"]})
    bsp_tta = rows[0]["time_to_target_s"]
    for r in rows:
        r["speedup_vs_bsp"] = ratio(bsp_tta, r["time_to_target_s"])
    return rows


def spoken(network: str) -> str:
    """"10 GbE" for the preset "10gbe" (other names unchanged)."""
    return f"{network[:-3]} GbE" if network.endswith("gbe") else network


def print_cluster_table(rows: list[dict], note: str) -> None:
    r0 = rows[0]
    print(f"\n{r0['cluster_label']}: {r0['cluster']}")
    w = max(len(r["label"]) for r in rows)
    head = (f"{'method':<{w}} {'compute':<22} {'total s':>9} {'s>target':>9} {'vs BSP':>8} {'comm s':>8} "
            f"{'syncs':>6} {'group syncs':>11}")
    print(head)
    print("-" * len(head))
    for r in rows:
        compute = f"{r['compute']} {r['compute_s']:.3g} s/step"
        tta = "never" if r["time_to_target_s"] is None else f"{r['time_to_target_s']:.4g}"
        print(f"{r['label']:<{w}} {compute:<22} {r['total_s']:>9.4g} {tta:>9} {fmt_ratio(r['speedup_vs_bsp']):>8} "
              f"{r['breakdown']['communication']:>8.4g} {r['syncs']:>6} {r['group_syncs']:>11}")
    print(textwrap.fill(note, 110))


# ----------------------------------------------------------------------- output


def fmt_ratio(x, pct=False):
    if x is None:
        return "not reached"
    return f"{x:.2f}x ({100 * (x - 1):+.0f}%)" if pct else f"{x:.2f}x"


def headline_rows(results: dict) -> list[dict]:
    """The rows of the printed / BENCHMARKS table."""
    rows = []
    for r in results["comparisons"]:
        if r["network"] != results["settings"]["network"] or r["target_frac"] != results["settings"]["target_frac"]:
            continue
        pair = r["pair"]
        if pair != "syncswitch_vs_bsp" and r["stragglers"] != "none":
            continue
        if pair == "selsync_vs_bsp":
            metric, value = "time-to-accuracy", fmt_ratio(r["time_to_accuracy_ratio"])
        elif pair == "syncswitch_vs_bsp":
            metric, value = "throughput", fmt_ratio(r["throughput_ratio"])
        else:
            metric, value = "speed (same steps)", fmt_ratio(r["throughput_ratio"], pct=True)
        rows.append({"pair": pair, "metric": metric, "paper": PAPER_CLAIMS[pair], "ours": value,
                     "compute": f"{r['compute']} {r['compute_s']:.3g} s/step", "network": r["network"],
                     "stragglers": r["stragglers"],
                     "time_to_accuracy": fmt_ratio(r["time_to_accuracy_ratio"])})
    return rows


def print_table(rows: list[dict]) -> None:
    head = f"{'pair':<18} {'metric':<19} {'ours':<16} {'TTA ratio':<12} {'compute':<22} {'net':<6} stragglers"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['pair']:<18} {r['metric']:<19} {r['ours']:<16} {r['time_to_accuracy']:<12} "
              f"{r['compute']:<22} {r['network']:<6} {r['stragglers']}")
    print("paper claims:")
    for k, v in PAPER_CLAIMS.items():
        print(f"  {k}: {v}")


def plot(results: dict, path: Path) -> bool:
    """Projected test accuracy vs projected time, one line per strategy, per pair."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    s = results["settings"]
    picks = [("selsync_vs_bsp", "none", "SelSync"), ("ssdsgd_vs_bsp", "none", "SSD-SGD"),
             ("syncswitch_vs_bsp", SYNCSWITCH_STRAGGLERS[1], "Sync-Switch")]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, (pair, strag, name) in zip(axes, picks):
        rows = [r for r in results["comparisons"] if r["pair"] == pair and r["stragglers"] == strag
                and r["network"] == s["network"] and r["compute"] == "gpu-class" and r["target_frac"] == s["target_frac"]]
        if not rows:
            continue
        r = rows[0]
        for key, label in (("bsp", "BSP"), ("other", name)):
            pts = r["curves"][key]
            ax.plot([t for _, _, t in pts], [a for _, a, _ in pts], label=label)
        ax.axhline(r["target_accuracy"], ls="--", lw=0.8, color="gray", label=f"target {r['target_accuracy']:.3f}")
        ax.set_title(f"{name} vs BSP ({s['network']}, stragglers: {strag})", fontsize=9)
        ax.set_xlabel(f"projected time (s), {s['replicas']} workers, c={r['compute_s']:.3g} s/step")
        ax.set_ylabel("test accuracy (digits, MLP)")
        ax.set_ylim(0.5, 1.0)
        ax.legend(fontsize=8)
    fig.suptitle("ResNet-101 payload, sync pattern and accuracy of real 10-replica digits runs", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def assumptions(args, model: dict) -> list[str]:
    """What every projected figure rests on, written into results.json beside it."""
    return [
        "Sync pattern and accuracy curve per step come from real jaxsel runs on digits with an MLP "
        f"({args.replicas} simulated CPU devices), mapped step-for-step onto ResNet-101 steps.",
        "Payload: every tree the MLP run moved (gradients or parameters) is replaced by our ResNet-101's "
        f"exact parameter bytes ({model['param_bytes']:,} B, float32); SelSync's 4-byte vote kept as is.",
        f"GPU-class compute: XLA FLOP count of our ResNet-101 fwd+bwd at b={args.batch}, 32x32 "
        f"({model['flops_per_step'] / 1e9:.0f} GFLOP) / {args.gpu_tflops:g} TFLOP/s effective (assumed V100-class)"
        if args.gpu_step_s is None else f"GPU-class compute: {args.gpu_step_s:g} s/step (given)",
        "CPU compute: median of the measured steps at the CPU batch, scaled linearly to the projected batch.",
        "Network: costmodel presets (ring all-reduce; parameter-server push+pull per worker for ASP steps, "
        "no server congestion); SSD-SGD's per-step all-reduce runs behind the next step (overlapped).",
        "Throughput: sum over workers of (steps / that worker's own finish time); "
        "time-to-accuracy: lock-step steps, first evaluation (every 10 steps) at or above the target.",
        cluster_assumption(args),
    ]


def cluster_assumption(args) -> str:
    """The cluster table's mapping, the group level's in the cost model's own words (so the
    note cannot drift from what `Projector` charges)."""
    from jaxsel import costmodel

    workers, per_group = args.hosts * args.gpus_per_host, args.replicas // HIER_GROUPS
    cluster = costmodel.Cluster(args.network, args.intra_network, args.gpus_per_host)
    level = costmodel.group_level(cluster, workers, HIER_GROUPS)
    return (f"Cluster table: {args.hosts} hosts x {args.gpus_per_host} GPUs; the {args.replicas}-replica runs' "
            f"sync patterns and accuracy curves mapped step for step onto {workers} workers; all-replica syncs "
            "pay the hierarchical all-reduce (intra reduce-scatter, inter all-reduce through one link per host, "
            "intra all-gather). The 'BSP inside hosts, SelSync across' row is a real "
            f"Hierarchical(inner=BSP, outer=SelSync with the SelSync run's settings, groups={HIER_GROUPS}) run: "
            f"{HIER_GROUPS} groups of {per_group} replicas, BSP's gradient mean inside each group every step, "
            "its own outer syncs, votes and accuracy curve. Projected onto "
            f"{workers} workers its group level is: {level.note}"
            + (f"; its accuracy is that of {HIER_GROUPS} groups of {per_group}, not of {workers // level.size} "
               f"groups of {level.size}." if level.size != per_group else "."))


# ------------------------------------------------------------------------- main


def main(argv=None) -> dict:
    args = parse_args(argv)
    ensure_cpu_devices(args.replicas)
    import jax

    from jaxsel import costmodel

    try:   # a bad cluster setting fails before any run
        costmodel.Cluster(args.network, args.intra_network, args.gpus_per_host)
    except ValueError as err:
        sys.exit(f"headline_projections.py: error: {err}")
    t_start = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    args.eval_every = 10
    window = 10 if args.quick else 25

    print(f"[1/3] ResNet-101: parameter bytes, FLOPs{'' if args.quick else ', one CPU step'}", flush=True)
    model = measure_model("resnet101", args.batch, args.cpu_batch, args.cpu_steps, time_cpu=not args.quick)
    flops_step = model["flops_per_step"]
    gpu_s = args.gpu_step_s if args.gpu_step_s is not None else flops_step / (args.gpu_tflops * 1e12)
    computes = [("gpu-class", gpu_s)]
    if "cpu_step_s" in model:   # CPU time at cpu_batch, scaled linearly to the projected batch
        computes.append(("cpu-measured", model["cpu_step_s"] * args.batch / args.cpu_batch))
    print(f"  {model['params']:,} params = {model['param_bytes'] / 1e6:.1f} MB; "
          f"{flops_step / 1e9:.0f} GFLOP per b={args.batch} step; GPU-class {gpu_s:.4f} s/step"
          + (f"; CPU {model['cpu_step_s']:.3f} s at b={args.cpu_batch}" if "cpu_step_s" in model else ""),
          flush=True)

    print(f"[2/3] real runs: digits, MLP, {args.replicas} replicas, {args.steps} steps", flush=True)
    warmup = max(1, round(0.03 * args.steps))
    runs = real_runs(args, window, warmup)
    small = {r["bytes"] - r["vote"] for k in ("bsp", "bsp_m0") for r in runs[k]["records"]}
    assert len(small) == 1, f"BSP steps moved different byte counts: {small}"
    small_bytes = small.pop()

    print(f"[3/3] projections ({args.replicas} workers)", flush=True)
    pairs = [("selsync_vs_bsp", "bsp", "selsync", ("none", SYNCSWITCH_STRAGGLERS[1])),
             ("ssdsgd_vs_bsp", "bsp", "ssdsgd", ("none", SYNCSWITCH_STRAGGLERS[1])),
             ("syncswitch_vs_bsp", "bsp_m0", "syncswitch", SYNCSWITCH_STRAGGLERS)]
    networks = sorted(set(SENSITIVITY_NETWORKS) | {args.network}, key=lambda n: costmodel.get_network(n).bandwidth)
    fracs = sorted(set(TARGET_FRACTIONS) | {args.target_frac})
    comparisons = []
    for pair, base, other, straggler_specs in pairs:
        for compute, compute_s in computes:
            for net in networks:
                for strag in straggler_specs:
                    for frac in fracs:
                        if (net != args.network or strag != "none") and frac != args.target_frac:
                            continue  # target sensitivity only on the headline scenario
                        scenario = {"compute": compute, "compute_s": compute_s, "network": net, "stragglers": strag}
                        comparisons.append(compare(pair, runs[base], runs[other], scenario, args,
                                                   small_bytes, model["param_bytes"], frac))

    cluster = [row for compute in computes
               for row in cluster_rows(runs, small_bytes, model["param_bytes"], compute, args)]
    ar = costmodel.allreduce_time(model["param_bytes"], args.replicas, args.network)
    ps = costmodel.parameter_server_time(model["param_bytes"], args.network)
    results = {
        "settings": {"quick": args.quick, "replicas": args.replicas, "steps": args.steps, "network": args.network,
                     "batch_projected": args.batch, "target_frac": args.target_frac, "seed": args.seed,
                     "gpu_tflops": args.gpu_tflops, "gpu_step_s_given": args.gpu_step_s,
                     "selsync_window": window, "ssdsgd_warmup_steps": warmup,
                     "cluster": {"hosts": args.hosts, "gpus_per_host": args.gpus_per_host,
                                 "intra_network": args.intra_network, "inter_network": args.network}},
        "machine": {"jax": jax.__version__, "python": platform.python_version(), "cpu_count": os.cpu_count(),
                    "devices": f"{jax.device_count()} x {jax.devices()[0].platform}",
                    "platform": platform.platform()},
        "model": model,
        "compute_s": dict(computes),
        "collectives": {"allreduce_s": ar, "parameter_server_s": ps,
                        "network": costmodel.get_network(args.network).describe()},
        "small_model_bytes": small_bytes,
        "runs": {k: run_summary(r) for k, r in runs.items()},
        "comparisons": comparisons,
        "paper_claims": PAPER_CLAIMS,
        "assumptions": assumptions(args, model),
        "cluster_table": cluster,
    }
    for r in comparisons:   # keep the curves of the plotted scenarios only
        if not (r["network"] == args.network and r["target_frac"] == args.target_frac and r["compute"] == "gpu-class"):
            del r["curves"]
    rows = headline_rows(results)
    results["table"] = rows
    results["wall_s"] = time.perf_counter() - t_start
    (out / "results.json").write_text(json.dumps(results, indent=2, default=float))
    plotted = plot(results, out / "accuracy_vs_projected_time.png")
    print_table(rows)
    print_cluster_table([r for r in cluster if r["compute"] == "gpu-class"], results["assumptions"][-1])
    print(f"wrote {out / 'results.json'}" + (f" and {out / 'accuracy_vs_projected_time.png'}" if plotted else "")
          + f" ({results['wall_s']:.0f} s)")
    return results


if __name__ == "__main__":
    main()
