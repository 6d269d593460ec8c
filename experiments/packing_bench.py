"""Packed replicas against one replica per device, side by side in one process.

Why: the issue "Replicas on any number of devices" packs k = N/M replicas on each device.
On a CPU box the old way to run 8 replicas was 8 simulated CPU devices sharing a few cores
(one thread each, rendezvous at every collective); packing runs them on one device as one
batched program. On a GPU the question is how close k packed replicas come to one replica
on k times the batch (the physical reference), and whether `vmap` (grouped convolutions)
or `lax.map` (plain convolutions one after another) is faster.

Layouts timed here, each with jaxsel's BSP step and a SelSync step that stays local:
  8x1        8 replicas on 8 devices, one each (the CPU layout before packing: simulated devices)
  2x4        8 replicas on 2 devices, 4 packed on each (vmap); 2x4unroll: unrolled
  1x8        8 replicas on 1 device, gradients by vmap (grouped convolutions)
  1x8unroll  8 replicas on 1 device, the plain gradient computation 8 times in one program
  1x8map     8 replicas on 1 device, gradients by lax.map (a loop)
and, on an accelerator (`--gpu-sweep`), k packed replicas on one device (`--ks`, default
1, 2, 4, 8, 16) at each per-replica batch (`--batches`) with each loop (`--loops`), beside
one replica at the packed total batch, timed side by side.

Steps are warmed up, then timed round-robin one blocked step at a time; medians.

  python experiments/packing_bench.py                       # CPU: 8 simulated devices
  python experiments/packing_bench.py --models mlp,cnn --json out.json
  python experiments/packing_bench.py --gpu-sweep --models resnet18   # one GPU
  python experiments/packing_bench.py --gpu-sweep --models resnet18 --ks 8 --batches 128,32   # issue 34's rows
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

CPU_LAYOUTS = (("8x1", 8, "unroll"), ("2x4", 2, "vmap"), ("2x4unroll", 2, "unroll"), ("1x8", 1, "vmap"),
               ("1x8unroll", 1, "unroll"), ("1x8map", 1, "map"))
LOOPS = ("vmap", "unroll", "map")
SHAPES = {"mlp": (784,), "cnn": (32, 32, 3), "resnet18": (32, 32, 3)}


def step_runner(model: str, replicas: int, devices: int, batch: int, strategy, packing: str):
    """A closure doing one blocked training step of `replicas` on `devices` (first call compiles)."""
    import jax
    import numpy as np
    import optax

    import jaxsel
    from jaxsel.models import FunctionalModel, build_model

    mesh = jaxsel.data_mesh(replicas, devices=devices)
    fm = FunctionalModel.from_module(build_model(model, SHAPES[model], 10, seed=0))
    opt = optax.sgd(0.01, momentum=0.9)
    state = [jaxsel.init_state(fm.params, opt, strategy, mesh, fm.model_state if fm.stateful else None,
                                replicas=replicas)]
    step = jaxsel.make_train_step(fm.classification_loss(), opt, strategy, mesh, stateful=fm.stateful,
                                  packing=packing)
    rng = np.random.default_rng(0)
    data = jaxsel.global_batch({"image": rng.standard_normal((replicas * batch, *SHAPES[model]), dtype=np.float32),
                                "label": rng.integers(0, 10, replicas * batch).astype(np.int32)}, mesh)

    def run() -> float:
        t0 = time.perf_counter()
        state[0], metrics = step(state[0], data)
        jax.block_until_ready((state[0], metrics))
        return time.perf_counter() - t0

    return run, jaxsel.describe_layout(mesh, replicas)


def time_side_by_side(runners: dict, warmup: int, repeats: int) -> dict:
    """Median seconds per step of each runner, timed round-robin after `warmup` steps."""
    for run in runners.values():
        for _ in range(warmup):
            run()
    times = {name: [] for name in runners}
    for _ in range(repeats):
        for name, run in runners.items():
            times[name].append(run())
    return {name: statistics.median(t) for name, t in times.items()}


def cpu_rows(models, batch: int, warmup: int, repeats: int, layouts=CPU_LAYOUTS) -> list[dict]:
    import jaxsel

    strategies = {"bsp": jaxsel.BSP(), "selsync_local": jaxsel.SelSync(delta=1e9, window=1)}
    rows = []
    for model in models:
        for sname, strategy in strategies.items():
            runners, names = {}, {}
            for name, devices, local in layouts:
                runners[name], names[name] = step_runner(model, 8, devices, batch, strategy, local)
            med = time_side_by_side(runners, warmup, repeats)
            for name, _, local in layouts:
                rows.append({"model": model, "strategy": sname, "name": name, "layout": names[name],
                             "packing": local, "ms_per_step": med[name] * 1e3,
                             "speedup_over_8x1": med["8x1"] / med[name] if "8x1" in med else None})
            print_rows(rows[-len(layouts):])
    return rows


def gpu_rows(models, batches, ks, loops, warmup: int, repeats: int) -> list[dict]:
    """k packed replicas on one device vs one replica on k x batch (images/s, memory): for
    each model, per-replica batch and k, every loop and the reference timed side by side
    (one row per loop, printed as soon as its group is measured)."""
    import jax

    import jaxsel

    rows = []
    for model in models:
        for batch in batches:
            for k in ks:
                runners = {"one_big": step_runner(model, 1, 1, k * batch, jaxsel.BSP(), "auto")[0]}
                failed = {}
                for local in loops:
                    try:
                        runners[local], layout = step_runner(model, k, 1, batch, jaxsel.BSP(), local)
                        runners[local]()   # compile now: a loop that does not fit is a row that says so
                    except Exception as err:   # noqa: BLE001 - out of memory, say
                        runners.pop(local, None)
                        failed[local] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:160]
                med = time_side_by_side(runners, warmup, repeats)
                stats = jax.devices()[0].memory_stats() or {}
                for local in loops:
                    row = {"model": model, "packed_replicas": k, "packing": local, "batch_per_replica": batch}
                    if local in failed:
                        rows.append({**row, "failed": failed[local]})
                    else:
                        rows.append({**row, "images_per_s": k * batch / med[local],
                                     "one_replica_images_per_s": k * batch / med["one_big"],
                                     "fraction_of_one_replica": med["one_big"] / med[local],
                                     "ms_per_step": med[local] * 1e3,
                                     "peak_bytes_in_use": stats.get("peak_bytes_in_use")})
                print_rows(rows[-len(loops):])
    return rows


def print_rows(rows: list[dict]) -> None:
    for r in rows:
        print("  ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()), flush=True)


def machine() -> dict:
    import jax

    d = jax.devices()[0]
    return {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "platform": d.platform,
            "device_kind": d.device_kind, "devices": jax.device_count(), "jax": jax.__version__,
            "load_average_at_start": os.getloadavg()}


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="mlp,cnn", help="comma-separated models of jaxsel.models")
    p.add_argument("--batch", type=int, default=32, help="examples per replica (CPU rows)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--gpu-sweep", action="store_true", help="k packed replicas on one accelerator")
    p.add_argument("--ks", default="1,2,4,8,16", help="--gpu-sweep: packed replicas per device")
    p.add_argument("--batches", default=None, help="--gpu-sweep: examples per replica (default: --batch)")
    p.add_argument("--loops", default=",".join(LOOPS), help="--gpu-sweep: the ways to compute packed replicas")
    p.add_argument("--layouts", default=None, help="CPU rows: names among " + ", ".join(n for n, _, _ in CPU_LAYOUTS))
    p.add_argument("--json", default=None, help="write the rows and the machine here")
    args = p.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    loops = [x.strip() for x in args.loops.split(",") if x.strip()]
    layouts = CPU_LAYOUTS if args.layouts is None else tuple(
        row for name in args.layouts.split(",") for row in CPU_LAYOUTS if row[0] == name.strip())
    try:
        ks, batches = _ints(args.ks), _ints(args.batches) if args.batches else [args.batch]
    except ValueError:
        ks, batches = [], []
    bad = [m for m in models if m not in SHAPES] + [x for x in loops if x not in LOOPS]
    if (bad or args.batch < 1 or args.warmup < 1 or args.repeats < 1 or not ks or not batches
            or min(ks + batches) < 1 or not layouts):
        print(f"packing_bench: error: models must be among {', '.join(SHAPES)}, loops among {', '.join(LOOPS)}, "
              f"layouts among {', '.join(n for n, _, _ in CPU_LAYOUTS)}, and batch/warmup/repeats/ks/batches >= 1 "
              f"(got models={args.models!r}, loops={args.loops!r}, layouts={args.layouts!r}, ks={args.ks!r}, "
              f"batches={args.batches!r}, batch={args.batch}, warmup={args.warmup}, repeats={args.repeats})",
              file=sys.stderr)
        return 2
    if not args.gpu_sweep:
        os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    info = machine()
    print(f"machine: {info}", flush=True)
    if args.gpu_sweep:
        rows = gpu_rows(models, batches, ks, loops, args.warmup, args.repeats)
    else:
        rows = cpu_rows(models, args.batch, args.warmup, args.repeats, layouts)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "rows": rows, "settings": vars(args)}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
