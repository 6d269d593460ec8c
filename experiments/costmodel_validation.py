"""Does `jaxsel.costmodel` predict real step times? 2 processes x 4 CPU devices over gloo.

The cost model projects runs onto networks we do not have, so it is only as good as its
collective model. Here it is checked where both sides can be measured: fit
`Network(bandwidth, latency)` to timed all-reduces on the 8-replica mesh, time steps that
never sync (the compute: a static local step, and one through `lax.cond` as conditional
strategies take), then time BSP, SelSync and local SGD steps and compare each with
`project_run(records, fitted, 8, compute)`. The error is reported as it comes out.

Caveat: this "network" is loopback gloo between 2 processes plus 4 simulated devices per
process sharing 2 cores, not a ring of 8 links; the flat ring model is a simplification
of that, and compute and communication compete for the same cores.

    python experiments/costmodel_validation.py [--steps 40] [--out runs/costmodel-validation]
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROCESSES = 2
DEVICES_PER_PROCESS = 4
REPLICAS = PROCESSES * DEVICES_PER_PROCESS
ROOT = Path(__file__).resolve().parents[1]
CAVEAT = ("caveat: 2 processes x 4 simulated CPU devices share this host's cores; the 'network' is loopback "
          "gloo plus in-process collectives, which the flat ring model only approximates")
DEFAULT_SIZES = "4,65536,1048576,4194304,16777216"   # all-reduce payloads, bytes per replica


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=40, help="timed training steps per strategy")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (compilation, warm caches)")
    p.add_argument("--sizes", default=DEFAULT_SIZES, help="calibration payloads, bytes per replica, comma-separated")
    p.add_argument("--repeats", type=int, default=15, help="timed all-reduces per calibration payload")
    p.add_argument("--hidden", default="1024,1024", help="MLP hidden widths, comma-separated")
    p.add_argument("--features", type=int, default=784, help="MLP input features (random data)")
    p.add_argument("--batch", type=int, default=16, help="examples per replica per step")
    p.add_argument("--selsync-delta", type=float, default=0.05,
                   help="SelSync's threshold; sets its sync fraction (about a third at the defaults)")
    p.add_argument("--out", default="runs/costmodel-validation", help="where results.json and the plot go")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--timeout", type=float, default=900, help="seconds before the workers are killed")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--process-id", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for name in ("steps", "warmup", "repeats", "batch", "features"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1")
    for name in ("sizes", "hidden"):
        try:
            if min(int(v) for v in getattr(args, name).split(",")) < 1:
                raise ValueError
        except ValueError:
            p.error(f"--{name} must be positive integers joined by commas, got {getattr(args, name)!r}")
    return args


# ------------------------------------------------------------------------ launcher


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args: argparse.Namespace, argv: list[str]) -> int:
    """Start the two workers; process 0 prints to our stdout, process 1 to a log shown on failure."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": str(DEVICES_PER_PROCESS),
           "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="costmodel-validation-") as tmp:
        log = Path(tmp) / "process1.log"
        procs = []
        with open(log, "w") as log1:
            for i in range(PROCESSES):
                cmd = [sys.executable, str(Path(__file__).resolve()), *argv, "--worker",
                       "--port", str(port), "--process-id", str(i)]
                out = None if i == 0 else log1
                procs.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT if out else None))
            deadline = time.monotonic() + args.timeout
            try:
                while any(p.poll() is None for p in procs):
                    if time.monotonic() > deadline or any(p.returncode not in (None, 0) for p in procs):
                        break
                    time.sleep(0.2)
            finally:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
                        p.wait()
        codes = [p.returncode for p in procs]
        if any(codes):
            print(f"costmodel_validation: workers exited with {codes}; process 1's log:\n"
                  f"{log.read_text()[-4000:]}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__" and "--worker" not in sys.argv[1:]:
    # The launcher only starts the two workers and waits: it needs none of JAX, so it does
    # not import it (seconds of start-up before the workers even start).
    _args = parse_args()
    sys.exit(launch(_args, sys.argv[1:]))

# The workers' side (and the analysis, also imported by the tests).
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402
from jax import lax  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

from jaxsel.core.parallel import AXIS, data_mesh, global_batch, local_replica_ids  # noqa: E402
from jaxsel.core.state import init_state  # noqa: E402
from jaxsel.core.step import make_train_step  # noqa: E402
from jaxsel.core.triggers import Never  # noqa: E402
from jaxsel.costmodel import Network, allreduce_time, project_run  # noqa: E402
from jaxsel.models import FunctionalModel, count_params  # noqa: E402
from jaxsel.models.mlp import MLP  # noqa: E402
from jaxsel.strategies import BSP, LocalSGD, SelSync, TriggeredStrategy  # noqa: E402
from jaxsel.training import distributed  # noqa: E402


# -------------------------------------------------------------------- measurement


def _timed(fn, *xs) -> float:
    """Seconds for one call, blocked (gloo programs must not overlap)."""
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*xs))
    return time.perf_counter() - t0


def time_allreduces(mesh, payloads: list[list[tuple]], repeats: int, warmup: int = 2) -> list[list[float]]:
    """Per payload (the shapes of its float32 arrays on one replica): `repeats` timings of
    a jitted shard_map'd psum of all of them (one program, as a step reduces its tree)."""
    psum = jax.jit(jax.shard_map(lambda x: lax.psum(x, AXIS), mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS)))
    ones = lambda shapes: [jnp.ones((REPLICAS, *shape), jnp.float32) for shape in shapes]
    timings = []
    for shapes in payloads:
        x = jax.jit(functools.partial(ones, shapes), out_shardings=NamedSharding(mesh, P(AXIS)))()
        for _ in range(warmup):
            _timed(psum, x)
        timings.append([_timed(psum, x) for _ in range(repeats)])
    return timings


def build_mlp(args) -> FunctionalModel:
    """The MLP on random `--features`-wide inputs, 10 classes; wide enough that its
    parameter all-reduce is a large share of a step."""
    hidden = tuple(int(h) for h in args.hidden.split(","))
    return FunctionalModel.from_module(MLP(args.features, 10, hidden, rngs=nnx.Rngs(0)))


def random_batches(mesh, features: int, batch: int, count: int, seed: int = 0) -> list:
    """`count` global batches of random data; each process places only its replicas' rows."""
    rng = np.random.default_rng(seed)
    rows = np.concatenate([np.arange(r * batch, (r + 1) * batch) for r in local_replica_ids(mesh)])
    out = []
    for _ in range(count):
        images = rng.standard_normal((REPLICAS * batch, features), dtype=np.float32)
        labels = rng.integers(0, 10, size=(REPLICAS * batch,), dtype=np.int32)
        out.append(global_batch({"image": images[rows], "label": labels[rows]}, mesh))
    return out


def _replicated_value(x):
    """A replicated metric's value, read from this process's own copy (no collective)."""
    return np.asarray(x.addressable_data(0) if isinstance(x, jax.Array) else x).item()


#: A strategy whose sync decision is computed on the device steps through `lax.cond`, which
#: costs time of its own on CPU; its compute is taken from a never-taken cond ("local_cond")
#: as well as from the plain local step ("local"), and both projections are reported.
COMPUTE_BASELINES = ("local", "local_cond")


def strategies(delta: float) -> dict:
    """name -> (strategy, the baseline of the same step structure: static or `lax.cond`)."""
    return {
        "local": (TriggeredStrategy(trigger=Never(), sync="params"), "local"),
        "local_cond": (LocalSGD(period=2**30), "local_cond"),
        "bsp": (BSP(), "local"),
        "localsgd4": (LocalSGD(period=4), "local_cond"),
        "selsync": (SelSync(delta=delta, window=3), "local_cond"),
    }


def time_training(mesh, fm, args) -> dict:
    """Per strategy: per-step seconds and records (step, synced, bytes_allreduced, vote_bytes).

    Strategies are stepped round-robin, one blocked step at a time, so drift in the machine's
    load hits them alike."""
    loss_fn, opt = fm.classification_loss(), optax.sgd(0.01)
    batches = random_batches(mesh, args.features, args.batch, count=8)
    runs = {}
    for name, (strategy, baseline) in strategies(args.selsync_delta).items():
        runs[name] = {"strategy": strategy, "baseline": baseline, "step": make_train_step(loss_fn, opt, strategy, mesh),
                      "state": init_state(fm.params, opt, strategy, mesh), "times": [], "metrics": []}
    for i in range(args.warmup + args.steps):
        for run in runs.values():
            t0 = time.perf_counter()
            run["state"], metrics = run["step"](run["state"], batches[i % len(batches)])
            jax.block_until_ready((run["state"], metrics))
            if i >= args.warmup:
                run["times"].append(time.perf_counter() - t0)
                run["metrics"].append({k: metrics[k] for k in ("synced", "bytes_allreduced", "vote_bytes")
                                       if k in metrics})
    out = {}
    for name, run in runs.items():
        vote = int(getattr(getattr(run["strategy"], "trigger", None), "vote_bytes", 0))
        records = [{"step": args.warmup + t, "synced": bool(_replicated_value(m["synced"])),
                    "bytes_allreduced": int(_replicated_value(m["bytes_allreduced"])),
                    "vote_bytes": int(_replicated_value(m["vote_bytes"])) if "vote_bytes" in m else vote}
                   for t, m in enumerate(run["metrics"])]
        out[name] = {"times": run["times"], "records": records, "baseline": run["baseline"]}
    return out


def gather_max(values: list[float]):
    """Each entry's maximum over the processes (a step ends when its slowest process does)."""
    return np.asarray(multihost_utils.process_allgather(np.asarray(values, np.float64))).max(axis=0)


# ----------------------------------------------------------------------- analysis


def fit_network(nbytes, seconds, replicas: int):
    """Least squares fit of T(B) = 2(N-1)*latency + 2(N-1)/N * B/bandwidth in relative error
    (weights 1/T, so 4-byte and 16-MiB payloads count alike), latency and 1/bandwidth >= 0.

    Returns (Network, fitted seconds per payload)."""
    b = np.asarray(nbytes, float)
    t = np.asarray(seconds, float)
    design = np.stack([np.full_like(b, 2 * (replicas - 1)), 2 * (replicas - 1) / replicas * b], axis=1)
    w = 1.0 / t
    latency, inv_bw = np.linalg.lstsq(design * w[:, None], t * w, rcond=None)[0]
    if latency < 0:   # the constraint binds: bandwidth alone
        latency = 0.0
        inv_bw = float(np.sum(w * w * design[:, 1] * t) / np.sum((w * design[:, 1]) ** 2))
    if inv_bw <= 0:   # payload does not matter at all: latency alone
        inv_bw = 1e-15
        latency = float(np.sum(w * w * design[:, 0] * t) / np.sum((w * design[:, 0]) ** 2))
    net = Network(bandwidth=1.0 / inv_bw, latency=float(latency), name="fitted (2 proc x 4 CPU, gloo)")
    return net, design @ np.array([net.latency, inv_bw])


def analyse(sizes, allreduce_s, tree_bytes: int, tree_s: list[float], training: dict) -> dict:
    """Fit the network to the flat payloads, predict the model's parameter tree with it
    (a check of the fit on the payload the steps really move), project every strategy and
    compare with the measurements."""
    medians = [float(np.median(t)) for t in allreduce_s]
    net, fitted = fit_network(sizes, medians, REPLICAS)
    calibration = [{"bytes_per_replica": int(b), "measured_ms": m * 1e3, "fitted_ms": float(f) * 1e3,
                    "residual_pct": (float(f) - m) / m * 100, "repeats_ms": [x * 1e3 for x in t]}
                   for b, m, f, t in zip(sizes, medians, fitted, allreduce_s)]
    tree_measured, tree_fitted = float(np.median(tree_s)), allreduce_time(tree_bytes, REPLICAS, net)
    model_tree = {"bytes_per_replica": int(tree_bytes), "measured_ms": tree_measured * 1e3,
                  "fitted_ms": tree_fitted * 1e3, "residual_pct": (tree_fitted - tree_measured) / tree_measured * 100,
                  "repeats_ms": [x * 1e3 for x in tree_s]}
    compute_s = {b: float(np.mean(training[b]["times"])) for b in COMPUTE_BASELINES}
    rows = []
    for name, run in training.items():
        times, records = np.asarray(run["times"]), run["records"]
        measured = float(times.mean())
        projected = {b: project_run(records, net, replicas=REPLICAS, compute_time_s=c)[1]["total"] / len(records)
                     for b, c in compute_s.items()}
        synced = np.array([r["synced"] for r in records])
        rows.append({
            "strategy": name, "measured_ms": measured * 1e3, "matched_baseline": run["baseline"],
            "projected_ms": {b: p * 1e3 for b, p in projected.items()},
            "error_pct": {b: (p - measured) / measured * 100 for b, p in projected.items()},
            "measured_median_ms": float(np.median(times)) * 1e3,
            "sync_fraction": float(synced.mean()),
            "payload_bytes": max((r["bytes_allreduced"] - r["vote_bytes"] for r in records if r["synced"]), default=0),
            "measured_sync_step_ms": float(times[synced].mean()) * 1e3 if synced.any() else None,
            "measured_local_step_ms": float(times[~synced].mean()) * 1e3 if (~synced).any() else None,
            "step_ms": (times * 1e3).tolist(), "records": records,
        })
    return {"network": {"bandwidth_bytes_per_s": net.bandwidth, "latency_s": net.latency,
                        "describe": net.describe()},
            "calibration": calibration, "model_tree_allreduce": model_tree,
            "compute_ms": {b: c * 1e3 for b, c in compute_s.items()}, "strategies": rows}


def _no_negative_zero(x: float) -> float:
    """Rounding noise of an exact match (x - x) shown as 0, not -0.00."""
    return 0.0 if abs(x) < 1e-9 else x


def report(result: dict) -> str:
    """The printed summary: the fit and its residuals, then measured vs projected per strategy."""
    net, m = result["network"], result["model"]
    fit = (f"fitted network: {net['bandwidth_bytes_per_s'] / 1e9:.3f} GB/s per direction, "
           f"{net['latency_s'] * 1e6:.1f} us per hop (ring model, N={REPLICAS})")
    lines = [fit, "", f"{'payload/replica':>16s} {'measured ms':>12s} {'fitted ms':>10s} {'residual':>9s}"]
    for c in result["calibration"]:
        lines.append(f"{c['bytes_per_replica']:16,d} {c['measured_ms']:12.3f} {c['fitted_ms']:10.3f} "
                     f"{c['residual_pct']:8.1f}%")
    t = result["model_tree_allreduce"]
    lines.append(f"{'model params*':>16s} {t['measured_ms']:12.3f} {t['fitted_ms']:10.3f} {t['residual_pct']:8.1f}%"
                 f"   * {t['bytes_per_replica']:,} B in the model's {m['arrays']} arrays; not in the fit")
    c = result["compute_ms"]
    model = (f"training: mlp {m['features']}-{'-'.join(map(str, m['hidden']))}-10, {m['params']:,} params "
             f"({m['params'] * 4 / 2**20:.1f} MiB), batch {m['batch_per_replica']}/replica, {REPLICAS} replicas")
    basis = (f"projections with compute = the mean step of 'local' ({c['local']:.2f} ms) or of 'local_cond' "
             f"({c['local_cond']:.2f} ms: the same never-syncing step, through lax.cond)")
    header = f"{'strategy':10s} {'syncs':>5s} {'measured ms':>11s}   " + "   ".join(
        f"{'projected ms, error':^22s}" for _ in COMPUTE_BASELINES)
    under = f"{'':29s}   " + "   ".join(f"{f'(compute: {b})':^22s}" for b in COMPUTE_BASELINES)
    lines += ["", model, basis, "* = the baseline with the strategy's own step structure", header, under]
    for r in result["strategies"]:
        cells = []
        for b in COMPUTE_BASELINES:
            mark = "*" if r["matched_baseline"] == b else " "
            cells.append(f"{r['projected_ms'][b]:11.2f} {_no_negative_zero(r['error_pct'][b]):+7.1f}%{mark}  ")
        lines.append(f"{r['strategy']:10s} {r['sync_fraction']:5.2f} {r['measured_ms']:11.2f}   " + "   ".join(cells))
    lines += ["", CAVEAT]
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    cal, tree = result["calibration"], result["model_tree_allreduce"]
    x = [c["bytes_per_replica"] for c in cal]
    net = Network(result["network"]["bandwidth_bytes_per_s"], result["network"]["latency_s"])
    curve = np.geomspace(min(x), max(x), 200)
    a.loglog(x, [c["measured_ms"] for c in cal], "o", label="measured (median)")
    a.loglog([tree["bytes_per_replica"]], [tree["measured_ms"]], "s", label="model's parameters (not fitted)")
    a.loglog(curve, [allreduce_time(b, REPLICAS, net) * 1e3 for b in curve], "-", label="ring model fit")
    a.set(xlabel="bytes per replica", ylabel="all-reduce ms", title=f"all-reduce, {REPLICAS} replicas")
    a.legend()
    rows = result["strategies"]
    pos = range(len(rows))
    b.bar([p - 0.2 for p in pos], [r["measured_ms"] for r in rows], 0.4, label="measured")
    b.bar([p + 0.2 for p in pos], [r["projected_ms"][r["matched_baseline"]] for r in rows], 0.4,
          label="projected (matched compute)")
    b.set_xticks(list(pos), [r["strategy"] for r in rows], fontsize=8)
    b.set(ylabel="ms / step", title="training step")
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ------------------------------------------------------------------------- worker


def worker(args: argparse.Namespace) -> None:
    """One of the two processes; only process 0 prints and writes."""
    dog = distributed.start(f"127.0.0.1:{args.port}", PROCESSES, args.process_id, peer_timeout=60)
    lead = jax.process_index() == 0
    say = (lambda msg: print(msg, flush=True)) if lead else (lambda msg: None)
    mesh = data_mesh(REPLICAS)
    sizes = [int(s) for s in args.sizes.split(",")]
    say(f"calibrating all-reduce over {REPLICAS} replicas ({PROCESSES} processes x {DEVICES_PER_PROCESS}): "
        f"{len(sizes)} payloads and the model's parameters, {args.repeats} repeats each")
    fm = build_mlp(args)
    params = jax.tree.leaves(fm.params)
    payloads = [[(max(1, b // 4),)] for b in sizes] + [[x.shape for x in params]]
    t0 = time.perf_counter()
    allreduce_s = [gather_max(t).tolist() for t in time_allreduces(mesh, payloads, args.repeats)]
    say(f"  done in {time.perf_counter() - t0:.1f} s; timing training steps ({args.warmup} warm-up + {args.steps})")
    t0 = time.perf_counter()
    training = time_training(mesh, fm, args)
    say(f"  done in {time.perf_counter() - t0:.1f} s\n")
    for run in training.values():
        run["times"] = gather_max(run["times"]).tolist()
    if lead:
        model = {"name": "mlp", "hidden": [int(h) for h in args.hidden.split(",")], "features": args.features,
                 "params": count_params(fm.params), "arrays": len(params), "batch_per_replica": args.batch}
        tree_bytes = sum(x.size * 4 for x in params)
        result = analyse(sizes, allreduce_s[:-1], tree_bytes, allreduce_s[-1], training)
        result = {"model": model, **result,
                  "setup": {"processes": PROCESSES, "devices_per_process": DEVICES_PER_PROCESS,
                            "replicas": REPLICAS, "steps": args.steps, "warmup": args.warmup,
                            "repeats": args.repeats, "selsync_delta": args.selsync_delta,
                            "cpu_count": os.cpu_count(), "jax_version": jax.__version__,
                            "timing": "per-step wall time, max over the 2 processes, each step blocked",
                            "caveat": CAVEAT}}
        print(report(result), flush=True)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(result, indent=2))
        if not args.no_plot:
            plot(result, out / "measured_vs_projected.png")
        print(f"\nwrote {out / 'results.json'}" + ("" if args.no_plot else f" and {out / 'measured_vs_projected.png'}"))
    distributed.barrier("costmodel-validation-done")
    dog.finish()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    return launch(args, argv)


if __name__ == "__main__":
    sys.exit(main())
