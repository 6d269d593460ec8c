"""XLA options A/B: jaxsel's step times under each set of XLA flags, one process per set.

Why (issue 34, item 4): XLA's GPU options (command buffers, i.e. CUDA graphs, and which
commands they capture; the autotuning level; Triton GEMMs) change a small model's
launch-bound step and a ResNet's kernels. jaxsel sets none of them by default: none was
measured on a GPU yet. This script measures them the only honest way, each set of flags in
its own process (XLA reads them once), the same `jaxsel bench` variants in each, so the
table answers "which flags help jaxsel's BSP and SelSync steps on this GPU". The
baseline row (no extra flags) runs first and last: the drift between them bounds what
a difference between rows can mean.

  python experiments/xla_ab.py --model cnn --json ab.json                 # on a GPU
  python experiments/xla_ab.py --model resnet18 --dtype bf16 --batch 256
  python experiments/xla_ab.py --tiny --sets baseline,no-graphs           # CPU smoke test

A set's flags are appended to the XLA_FLAGS the process was started with.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

#: name -> extra XLA flags (GPU options; XLA:CPU accepts and ignores them)
SETS = {
    "baseline": "",
    "graphs+cond": "--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,CONDITIONAL,WHILE",
    "no-graphs": "--xla_gpu_enable_command_buffer=",
    "graphs-min2": "--xla_gpu_graph_min_graph_size=2",
    "autotune0": "--xla_gpu_autotune_level=0",
    "no-triton-gemm": "--xla_gpu_enable_triton_gemm=false",
}
#: the `jaxsel bench` variants each set runs (`--variants`): jaxsel's BSP step against a user's
#: loop with as_optax(BSP) and the hand-written step, and SelSync's local step (its guarded
#: conditional never taken: what command buffers with conditionals change) against a plain one
VARIANTS = ("bsp", "user_bsp", "minimal", "selsync_local", "local")


def run_set(name: str, args, out_dir: str) -> dict:
    """One set's `jaxsel bench` in a child process: its medians, or why it failed."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = " ".join(x for x in (os.environ.get("XLA_FLAGS", ""), SETS[name]) if x)
    path = os.path.join(out_dir, f"{name}.json")
    cmd = [sys.executable, "-m", "jaxsel.cli", "bench", "--model", args.model, "--dtype", args.dtype,
           "--packed-replicas", "0", "--variants", ",".join(VARIANTS), "--json", path]
    cmd += ["--size", "tiny"] if args.tiny else ["--repeats", str(args.repeats)]
    if args.batch:
        cmd += ["--batch", str(args.batch)]
    if args.replicas:
        cmd += ["--replicas", str(args.replicas)]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    seconds = time.perf_counter() - t0
    if done.returncode != 0 or not os.path.exists(path):
        return {"set": name, "flags": SETS[name], "failed": (done.stderr or done.stdout).strip().splitlines()[-1:],
                "seconds": seconds}
    with open(path) as f:
        result = json.load(f)
    return {"set": name, "flags": SETS[name], "seconds": seconds, "device_kind": result["device_kind"],
            "median_step_ms": result["median_step_ms"], "ratios": result["ratios"]}


def line(row: dict) -> str:
    if "failed" in row:
        return f"{row['set']:16s} failed: {' '.join(row['failed'])[:160]}"
    ms = row["median_step_ms"]
    return f"{row['set']:16s} " + " ".join(f"{ms.get(v, float('nan')):10.3f}" for v in VARIANTS) + \
        f"   ({row['seconds']:.0f} s)"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="cnn")
    p.add_argument("--dtype", default="fp32", choices=("fp32", "bf16"))
    p.add_argument("--batch", type=int, default=None, help="per replica (default: jaxsel bench's)")
    p.add_argument("--repeats", type=int, default=100)
    p.add_argument("--replicas", type=int, default=None, help="jaxsel bench's (default: one per device)")
    p.add_argument("--sets", default="baseline,graphs+cond,no-graphs,graphs-min2,baseline",
                   help=f"comma-separated, among {', '.join(SETS)} (a name twice runs twice)")
    p.add_argument("--timeout", type=float, default=240, help="seconds per set")
    p.add_argument("--tiny", action="store_true", help="jaxsel bench --size tiny (a CPU smoke test)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    bad = [s for s in sets if s not in SETS]
    if bad or not sets or args.repeats < 1:
        print(f"xla_ab: error: sets must be among {', '.join(SETS)} and repeats >= 1, got sets={args.sets!r}, "
              f"repeats={args.repeats}", file=sys.stderr)
        return 2
    print(f"model={args.model} dtype={args.dtype} batch={args.batch or 'default'}; median ms per step, one process "
          f"per set, XLA_FLAGS at start: {os.environ.get('XLA_FLAGS', '')!r}", flush=True)
    print(f"{'set':16s} " + " ".join(f"{v:>10s}" for v in VARIANTS), flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="jaxsel-xla-ab-") as tmp:
        for i, name in enumerate(sets):
            folder = os.path.join(tmp, str(i))
            os.makedirs(folder)
            try:
                rows.append(run_set(name, args, folder))
            except subprocess.TimeoutExpired:
                rows.append({"set": name, "flags": SETS[name], "failed": [f"over {args.timeout:.0f} s"]})
            print(line(rows[-1]), flush=True)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump({"sets": SETS, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
