"""Training throughput and MFU of jaxsel's ResNets on one accelerator, beside PyTorch.

Why: SelSync's claims are wall-clock claims, so the per-step compute that the cost model
(`jaxsel.costmodel`) multiplies must be competitive. This script measures, for ResNet-18 on
CIFAR-shaped batches (32x32) and ResNet-50 on 224x224:

  jax     a plain jitted train step (value_and_grad + optax SGD-momentum), no framework;
  jaxsel  jaxsel's BSP step (`make_train_step`) on a mesh of `--replicas` devices;
  torch   the same architecture in PyTorch, the strongest configuration a user would run
          (one row per `--torch-modes`, best first): torch.compile(mode="max-autotune",
          dynamic=False) with CUDA graphs, then the default mode as the fallback row;
          channels_last, bf16 autocast, fused SGD, one fixed batch (static shapes),
          cudnn.benchmark. torch._dynamo's counters are read after the warm-up and after
          timing: a row that recompiled while timed is discarded and says why. Only when
          torch is importable (imported lazily; torchvision is not needed).

Mixed precision everywhere: parameters and BatchNorm statistics fp32, compute bf16 (Flax
modules get `dtype=bfloat16` through `jaxsel.analysis.precision`, the code `jaxsel bench --dtype bf16`
runs; torch uses autocast). Model FLOPs per step are counted from
the forward pass's program (`jaxsel.analysis.flops`: every matmul and convolution, 2 FLOPs per
multiply-add, x 3 for forward + backward: ResNet-50 is 4.1 GMACs per 224x224 image, so
~3,150 GFLOP per step at batch 128) and serve for torch too (same model). XLA's
`cost_analysis()` is kept as `xla_flops_per_step` for reference only: on GPUs it leaves out
the cuDNN/cuBLAS calls and undercounts by one to two orders of magnitude.
MFU = model FLOPs/step * steps/s / peak bf16 FLOP/s. Each variant's line is printed (and
the JSON rewritten) as soon as it is measured, so a time limit loses only the one in hand.
Nothing here imports tensorflow-datasets (random batches).

  python experiments/gpu_throughput.py                 # on a GPU machine
  python experiments/gpu_throughput.py --tiny          # CPU smoke test at toy sizes
  python experiments/gpu_throughput.py --json out.json --models resnet50 --batch 128
  python experiments/gpu_throughput.py --torch-modes default      # the quicker anchor only
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import time

#: Dense bf16 peak FLOP/s by device-kind substring (first match wins); others need --peak-tflops.
PEAK_BF16 = (
    ("H100 PCIe", 756e12),
    ("H100", 989e12),
    ("H200", 989e12),
    ("GH200", 989e12),
    ("A100", 312e12),
    ("L40S", 362e12),
    ("L4", 121e12),
    ("A10G", 70e12),
)

#: Full size (GPU) and --tiny (CPU smoke test) workloads.
#: ResNet-50's tiny input is 72 px so the ImageNet stem (chosen above 64 px) is exercised.
WORKLOADS = {
    "resnet18": {"full": dict(input_shape=(32, 32, 3), classes=10, batch=256),
                 "tiny": dict(input_shape=(16, 16, 3), classes=10, batch=2)},
    "resnet50": {"full": dict(input_shape=(224, 224, 3), classes=1000, batch=128),
                 "tiny": dict(input_shape=(72, 72, 3), classes=10, batch=2)},
}


def log(msg: str) -> None:
    """Progress on stderr (compiles take minutes), keeping stdout for the table / JSON."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def peak_flops(device_kind: str, override_tflops: float | None) -> float | None:
    if override_tflops:
        return override_tflops * 1e12
    for key, value in PEAK_BF16:
        if key.lower() in device_kind.lower():
            return value
    return None


def timed_throughput(run_steps, steps: int, repeats: int) -> float:
    """Median steps/s over `repeats` runs of `run_steps(steps)` (which must block at its end)."""
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run_steps(steps)
        rates.append(steps / (time.perf_counter() - t0))
    return statistics.median(rates)


# ------------------------------------------------------------------------------ JAX


def _flops(compiled) -> float | None:
    """FLOPs of a compiled (or lowered) computation from XLA's cost analysis."""
    try:
        cost = compiled.cost_analysis()
    except Exception:  # noqa: BLE001 - some backends do not implement it
        return None
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    value = (cost or {}).get("flops")
    return float(value) if value and value > 0 else None


def bench_jax(name: str, input_shape, classes: int, batch: int, steps: int, warmup: int, repeats: int,
              replicas: int) -> dict:
    """Images/s and FLOPs of the plain JAX step and of jaxsel's BSP step."""
    import jax
    import numpy as np
    import optax

    import jaxsel
    from jaxsel.analysis import precision
    from jaxsel.analysis.flops import training_flops
    from jaxsel.models import count_params

    fm = precision.build(name, input_shape, classes, dtype="bf16")
    loss_fn = precision.classification_loss(fm, "bf16")   # the mixed precision `jaxsel bench --dtype bf16` runs
    opt = optax.sgd(0.1, momentum=0.9)
    rng = np.random.default_rng(0)
    host = {"image": rng.standard_normal((batch, *input_shape), dtype=np.float32),
            "label": rng.integers(0, classes, size=(batch,), dtype=np.int32)}
    out = {"params": count_params(fm.params)}

    # plain JAX: what one writes for a single device
    def plain_step(params, model_state, opt_state, data):
        (loss, model_state), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, model_state, data)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), model_state, opt_state, loss

    device = jax.devices()[0]
    data = jax.device_put(host, device)
    # copies: the step donates its inputs, and fm.params must survive for the jaxsel variant
    carry = jax.tree.map(lambda x: jax.device_put(np.array(x), device), (fm.params, fm.model_state, opt.init(fm.params)))
    plain = jax.jit(plain_step, donate_argnums=(0, 1, 2))
    lowered = plain.lower(*carry, data)
    compiled = lowered.compile()
    out["flops_per_step"] = float(training_flops(fm.logits_fn("image"), fm.params, fm.model_state, host))
    out["xla_flops_per_step"] = _flops(compiled)   # reference only: misses library calls on GPUs
    state = {"carry": carry}

    def run_plain(n):
        c = state["carry"]
        for _ in range(n):
            *c, loss = compiled(*c, data)
        jax.block_until_ready(loss)
        state["carry"] = tuple(c)

    run_plain(warmup)
    out["jax_steps_per_s"] = timed_throughput(run_plain, steps, repeats)

    # jaxsel's BSP step on `replicas` devices, each with `batch` examples
    mesh = jaxsel.data_mesh(replicas)
    strat = jaxsel.BSP()
    ts = jaxsel.init_state(fm.params, opt, strat, mesh, fm.model_state, replicas=replicas)
    step = jaxsel.make_train_step(loss_fn, opt, strat, mesh, stateful=True)
    gdata = jaxsel.global_batch(jax.tree.map(lambda x: np.concatenate([x] * replicas), host), mesh)
    jstate = {"ts": ts}

    def run_jaxsel(n):
        s = jstate["ts"]
        for _ in range(n):
            s, metrics = step(s, gdata)
        jax.block_until_ready((s, metrics))
        jstate["ts"] = s

    run_jaxsel(warmup)
    out["jaxsel_steps_per_s"] = timed_throughput(run_jaxsel, steps, repeats)
    out["device_kind"] = device.device_kind
    out["platform"] = device.platform
    return out


# ---------------------------------------------------------------------------- torch


def torch_resnet(name: str, classes: int, input_shape):
    """The jaxsel ResNet architecture (same stems, v1.5 bottleneck, projection shortcuts,
    torch-default BatchNorm, He fan-out init) written in PyTorch."""
    import torch
    from torch import nn

    def conv(cin, cout, k, stride=1):
        return nn.Conv2d(cin, cout, k, stride, k // 2, bias=False)

    class Basic(nn.Module):
        expansion = 1

        def __init__(self, cin, planes, stride):
            super().__init__()
            cout = planes
            self.conv1, self.bn1 = conv(cin, planes, 3, stride), nn.BatchNorm2d(planes)
            self.conv2, self.bn2 = conv(planes, cout, 3), nn.BatchNorm2d(cout)
            self.short = (nn.Sequential(conv(cin, cout, 1, stride), nn.BatchNorm2d(cout))
                          if stride != 1 or cin != cout else nn.Identity())

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(y)) + self.short(x))

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, cin, planes, stride):
            super().__init__()
            cout = planes * 4
            self.conv1, self.bn1 = conv(cin, planes, 1), nn.BatchNorm2d(planes)
            self.conv2, self.bn2 = conv(planes, planes, 3, stride), nn.BatchNorm2d(planes)
            self.conv3, self.bn3 = conv(planes, cout, 1), nn.BatchNorm2d(cout)
            self.short = (nn.Sequential(conv(cin, cout, 1, stride), nn.BatchNorm2d(cout))
                          if stride != 1 or cin != cout else nn.Identity())

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            y = torch.relu(self.bn2(self.conv2(y)))
            return torch.relu(self.bn3(self.conv3(y)) + self.short(x))

    block, sizes = {"resnet18": (Basic, (2, 2, 2, 2)), "resnet50": (Bottleneck, (3, 4, 6, 3))}[name]
    imagenet = max(input_shape[:2]) > 64  # the same rule as jaxsel.models
    layers = [conv(input_shape[-1], 64, 7, 2) if imagenet else conv(input_shape[-1], 64, 3), nn.BatchNorm2d(64),
              nn.ReLU()]
    if imagenet:
        layers.append(nn.MaxPool2d(3, 2, 1))
    cin = 64
    for i, (n, planes) in enumerate(zip(sizes, (64, 128, 256, 512))):
        for j in range(n):
            layers.append(block(cin, planes, 2 if i > 0 and j == 0 else 1))
            cin = planes * block.expansion
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    model = nn.Sequential(*layers)
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
    return model


#: torch.compile modes of the anchor, best first: max-autotune (Triton autotuning, and CUDA
#: graphs on a GPU), then the default mode as the fallback row; "eager" with --no-compile.
TORCH_MODES = ("max-autotune", "default")
#: max-autotune with its autotuning bounded: the convolutions left to cuDNN (inductor's
#: `max_autotune_conv_backends="ATEN"`), the GEMMs and fused kernels still autotuned, CUDA
#: graphs still on. Why: on an H100 (issue 45) unbounded max-autotune benchmarked 10-18
#: Triton templates for each of ResNet-18's 12 convolution shapes, 5-13 s each, and was still
#: tuning after 150 s; this mode compiles in the time the default mode takes.
BOUNDED = "max-autotune-bounded"
#: the modes whose inductor backend captures the step in CUDA graphs (on a GPU)
CUDA_GRAPH_MODES = ("max-autotune", "reduce-overhead", BOUNDED)


def anchor_config(mode: str, device: str, fused: bool) -> str:
    """The anchor's configuration, printed beside its figure."""
    if mode == "eager":
        how = "eager (no torch.compile)"
    else:
        graphs = ", CUDA graphs" if mode in CUDA_GRAPH_MODES and device == "cuda" else ""
        how = f"torch.compile(mode={_compile_mode(mode)!r}, dynamic=False{graphs})"
        if mode == BOUNDED:
            how += ", convolutions not autotuned (cuDNN's; max_autotune_conv_backends='ATEN')"
    opt = "SGD(momentum=0.9, fused=True)" if fused else "SGD(momentum=0.9, foreach)"
    return f"{how}, channels_last, bf16 autocast, {opt}, static shapes (one fixed batch), cudnn.benchmark"


def _compile_mode(mode: str) -> str | None:
    """torch.compile's `mode` for an anchor mode (None: the default)."""
    return {"default": None, BOUNDED: "max-autotune"}.get(mode, mode)


def inductor_bounds(mode: str) -> dict:
    """The inductor settings an anchor mode patches (`torch._inductor.config.patch`)."""
    if mode != BOUNDED:
        return {}
    import torch._inductor.config as inductor

    return {"max_autotune_conv_backends": "ATEN"} if hasattr(inductor, "max_autotune_conv_backends") else {}


def _patched(bounds: dict):
    """A context with inductor's settings patched to `bounds` (none: nothing imported)."""
    if not bounds:
        return contextlib.nullcontext()
    import torch._inductor.config as inductor

    return inductor.patch(bounds)


def dynamo_counts() -> dict:
    """torch._dynamo's process-wide counters: graphs compiled, recompiles, graph breaks."""
    from torch._dynamo.utils import counters

    return {"graphs": int(counters["stats"]["unique_graphs"]),
            "recompiles": int(sum(counters["recompiles"].values())),
            "graph_breaks": int(sum(counters["graph_break"].values()))}


def counts_between(before: dict, after: dict) -> dict:
    return {k: after[k] - before[k] for k in after}


def fused_sgd(params, device: str):
    """SGD-momentum with the fused (single-kernel) implementation where this torch has it."""
    import torch

    params = list(params)
    if device == "cuda":
        try:
            return torch.optim.SGD(params, lr=0.1, momentum=0.9, fused=True), True
        except (TypeError, RuntimeError):   # an older torch without the fused kernel
            pass
    return torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=True), False


def torch_step(model, fwd, opt, x, y, device: str, cuda_graphs: bool):
    """One training step of the anchor (bf16 autocast, fp32 master weights)."""
    import torch

    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        if cuda_graphs:
            torch.compiler.cudagraph_mark_step_begin()   # the previous step's graph outputs may be reused
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = loss_fn(fwd(x), y)
        loss.backward()
        opt.step()
    return step


def bench_torch_mode(name: str, input_shape, classes: int, batch: int, steps: int, warmup: int, repeats: int,
                     mode: str) -> dict:
    """Images/s of one anchor configuration; the row fails (with the reason) if dynamo
    recompiled while it was timed."""
    import torch

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    model = torch_resnet(name, classes, input_shape).to(dev).to(memory_format=torch.channels_last).train()
    h, w, c = input_shape
    x = torch.randn(batch, c, h, w, device=dev).to(memory_format=torch.channels_last)   # one fixed batch
    y = torch.randint(0, classes, (batch,), device=dev)
    opt, fused = fused_sgd(model.parameters(), dev)
    out = {"mode": mode, "config": anchor_config(mode, dev, fused), "torch_version": torch.__version__,
           "torch_params": sum(p.numel() for p in model.parameters()),
           "torch_device": torch.cuda.get_device_name() if dev == "cuda" else "cpu"}
    fwd = model if mode == "eager" else torch.compile(model, mode=_compile_mode(mode), dynamic=False)
    step = torch_step(model, fwd, opt, x, y, dev, mode in CUDA_GRAPH_MODES and dev == "cuda")
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    bounds = inductor_bounds(mode) if mode != "eager" else {}
    if mode == BOUNDED and not bounds:
        out["config"] += " [this torch has no max_autotune_conv_backends: autotuning unbounded]"

    def run(n):
        with _patched(bounds):   # compiles happen in the first calls
            for _ in range(n):
                step()
        sync()

    start = dynamo_counts()
    try:
        run(max(warmup, 3 if mode in CUDA_GRAPH_MODES else 1))   # CUDA graphs record on the 2nd/3rd call
    except Exception as e:  # noqa: BLE001 - e.g. no C++ compiler for inductor: the row says why
        out["error"] = f"warm-up failed: {repr(e)[:300]}"
        return out
    warm = dynamo_counts()
    out["steps_per_s"] = timed_throughput(run, steps, repeats)
    timed = counts_between(warm, dynamo_counts())
    out["compiles_warmup"], out["compiles_timing"] = counts_between(start, warm), timed
    out["recompiles"] = warm["recompiles"] - start["recompiles"] + timed["recompiles"]
    if timed["graphs"] or timed["recompiles"]:
        out["error"] = (f"recompiled while timed ({timed['graphs']} new graphs, {timed['recompiles']} recompiles): "
                        f"shapes were not static; figure discarded")
        out.pop("steps_per_s")
    return out


# ----------------------------------------------------------------------------- main

#: anchors an earlier session measured: (model, device-kind substring, batch, what and when).
#: Printed, labelled as such, beside a run on such a device, so that a session whose own
#: anchor is bounded (BOUNDED) or cut short still shows the strongest figure known.
CACHED_ANCHORS = (
    ("resnet18", "H100", 256, "torch.compile(mode='max-autotune', unbounded autotuning) + CUDA graphs, channels_last, "
                              "bf16 autocast, fused SGD: 64,393 img/s (3.98 ms/step); issue 34's session on an H100 "
                              "80GB HBM3, torch 2.11 (BENCHMARKS.md)"),
)


def cached_anchor(row: dict) -> str | None:
    """The earlier session's anchor for this row's model, device and batch, if any."""
    return next((text for model, kind, batch, text in CACHED_ANCHORS
                 if model == row["model"] and kind in row.get("device_kind", "") and batch == row["batch"]), None)


ANCHOR_MODES = ("max-autotune", "default", "reduce-overhead", "max-autotune-no-cudagraphs", BOUNDED, "eager")


def add_rates(entry: dict, flops: float | None, peak: float | None, images_per_step: int) -> dict:
    """images/s and MFU (model FLOPs/step x steps/s / peak) of one measured variant."""
    sps = entry.get("steps_per_s")
    entry["images_per_s"] = sps * images_per_step if sps else None
    entry["mfu"] = flops * sps / peak if (sps and flops and peak) else None
    return entry


def measure_jax(name: str, size: str, args) -> dict:
    """The row of one model: its workload, FLOPs, and the plain JAX and jaxsel variants."""
    cfg = dict(WORKLOADS[name][size])
    if args.batch:
        cfg["batch"] = args.batch
    row = {"model": name, "input_shape": list(cfg["input_shape"]), "classes": cfg["classes"], "batch": cfg["batch"],
           "replicas": args.replicas, "torch": []}
    log(f"{name}: JAX and jaxsel steps, batch {cfg['batch']}, input {cfg['input_shape']}")
    measured = bench_jax(name, cfg["input_shape"], cfg["classes"], cfg["batch"], args.steps, args.warmup,
                         args.repeats, args.replicas)
    row.update({k: v for k, v in measured.items() if not k.endswith("_steps_per_s")})
    row["peak_flops"] = peak_flops(row["device_kind"], args.peak_tflops)
    # jaxsel's step runs `replicas` copies of the model, one per device: MFU is per device
    for v, images in (("jax", cfg["batch"]), ("jaxsel", cfg["batch"] * args.replicas)):
        row[v] = add_rates({"steps_per_s": measured[f"{v}_steps_per_s"]}, row["flops_per_step"], row["peak_flops"],
                           images)
    return row


def _fmt(value, spec: str, width: int) -> str:
    return f"{'n/a':>{width}s}" if value is None else f"{value:{width}{spec}}"


HEADER = (f"{'model':9s} {'input':>11s} {'batch':>5s} {'variant':22s} {'images/s':>10s} {'ms/step':>9s} "
          f"{'GFLOP/step':>10s} {'MFU':>6s}  configuration")


def variant_line(row: dict, variant: str, entry: dict, config: str) -> str:
    shape = "x".join(str(d) for d in row["input_shape"])
    sps, mfu, flops = entry.get("steps_per_s"), entry.get("mfu"), row.get("flops_per_step")
    return (f"{row['model']:9s} {shape:>11s} {row['batch']:5d} {variant:22s} {_fmt(entry.get('images_per_s'), '.1f', 10)} "
            f"{_fmt(1e3 / sps if sps else None, '.2f', 9)} {_fmt(flops / 1e9 if flops else None, '.2f', 10)} "
            f"{'n/a' if mfu is None else f'{100 * mfu:5.1f}%':>6s}  {config}")


def jax_lines(row: dict) -> list[str]:
    return [variant_line(row, "jax", row["jax"], "plain jitted step, optax SGD-momentum, bf16 compute / fp32 params"),
            variant_line(row, "jaxsel", row["jaxsel"], f"jaxsel BSP step, {row['replicas']} replica(s), same precision")]


def anchor_lines(row: dict, anchor: dict) -> list[str]:
    """An anchor's figure beside its configuration; a failed anchor says why."""
    lines = [variant_line(row, f"torch {anchor['mode']}", anchor, anchor["config"])]
    if "recompiles" in anchor:
        lines.append(f"{'':9s} dynamo: {anchor['compiles_warmup']['graphs']} graph(s) compiled in warm-up, "
                     f"{anchor['recompiles']} recompile(s), {anchor['compiles_warmup']['graph_breaks']} graph "
                     f"break(s); while timed: {anchor['compiles_timing']['graphs']} new graph(s)")
    if anchor.get("error"):
        lines.append(f"{'':9s} FAILED: {anchor['error']}")
    if anchor.get("torch_params") and anchor["torch_params"] != row["params"]:
        lines.append(f"{'':9s} WARNING: parameter counts differ (jax {row['params']}, torch {anchor['torch_params']})")
    return lines


def best_anchor(row: dict) -> dict | None:
    done = [a for a in row["torch"] if a.get("images_per_s")]
    return max(done, key=lambda a: a["images_per_s"]) if done else None


def summary_line(row: dict) -> str | None:
    """jaxsel's BSP step against the best anchor that ran (issue 15's target: >= 1.1x on ResNet-50)."""
    best = best_anchor(row)
    if best is None or not row["jaxsel"].get("images_per_s"):
        return None
    per_device = row["jaxsel"]["images_per_s"] / row["replicas"]
    return f"{'':9s} jaxsel BSP / best PyTorch anchor ({best['mode']}): {per_device / best['images_per_s']:.3f}x images/s"


def format_table(rows: list[dict]) -> str:
    lines = [HEADER, "-" * len(HEADER)]
    for r in rows:
        lines += jax_lines(r)
        for anchor in r["torch"]:
            lines += anchor_lines(r, anchor)
        if r.get("torch_skipped"):
            lines.append(f"{'':9s} torch: {r['torch_skipped']}")
        summary = summary_line(r)
        if summary:
            lines.append(summary)
    return "\n".join(lines)


def write_json(path: str | None, tiny: bool, rows: list[dict]) -> None:
    """Rewrite the JSON with every row so far (a time limit loses only the measurement in hand)."""
    if path and path != "-":
        with open(path, "w") as f:
            f.write(json.dumps({"tiny": tiny, "rows": rows}, indent=2, default=float))


def torch_missing() -> str | None:
    import importlib.util

    return None if importlib.util.find_spec("torch") else "torch is not importable"


def parse_args(argv=None) -> argparse.Namespace:
    """The options, defaults filled in; a bad option: one line on stderr, SystemExit(2)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tiny", action="store_true", help="toy sizes, to validate the script on a CPU")
    p.add_argument("--models", default="resnet18,resnet50", help="comma-separated: resnet18, resnet50")
    p.add_argument("--batch", type=int, default=None, help="per-device batch (default: per model)")
    p.add_argument("--steps", type=int, default=None, help="timed steps per repeat (default 50; tiny 2)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps after compiling (default 10; tiny 1)")
    p.add_argument("--repeats", type=int, default=None, help="median over this many timings (default 5; tiny 1)")
    p.add_argument("--replicas", type=int, default=1, help="devices for the jaxsel BSP variant")
    p.add_argument("--peak-tflops", type=float, default=None, help="peak bf16 TFLOP/s for MFU if the device is unknown")
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch comparison")
    p.add_argument("--torch-modes", default=",".join(TORCH_MODES),
                   help=f"anchor rows, best first (of: {', '.join(ANCHOR_MODES)})")
    p.add_argument("--no-compile", action="store_true", help="one eager PyTorch row (same as --torch-modes eager)")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the results as JSON ('-' = stdout)")
    args = p.parse_args(argv)
    args.steps = args.steps if args.steps is not None else (2 if args.tiny else 50)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.tiny else 10)
    args.repeats = args.repeats if args.repeats is not None else (1 if args.tiny else 5)
    args.names = [m.strip() for m in args.models.split(",") if m.strip()]
    args.modes = ["eager"] if args.no_compile else [m.strip() for m in args.torch_modes.split(",") if m.strip()]
    problem = (f"unknown model(s) {[m for m in args.names if m not in WORKLOADS]}; choose from {', '.join(WORKLOADS)}"
               if not args.names or any(m not in WORKLOADS for m in args.names) else
               f"unknown --torch-modes {[m for m in args.modes if m not in ANCHOR_MODES]}; choose from "
               f"{', '.join(ANCHOR_MODES)}" if not args.modes or any(m not in ANCHOR_MODES for m in args.modes) else
               next((f"--{k} must be an integer >= {low}, got {getattr(args, k)}" for k, low in
                     (("steps", 1), ("warmup", 0), ("repeats", 1), ("replicas", 1)) if getattr(args, k) < low), None)
               or ("--batch must be an integer >= 1" if args.batch is not None and args.batch < 1 else None))
    if problem:
        print(f"gpu_throughput: error: {problem}", file=sys.stderr)
        raise SystemExit(2)
    return args


def run_model(name: str, size: str, args, rows: list[dict]) -> dict:
    """Measure one model, printing each variant's lines and rewriting the JSON as they come."""
    row = measure_jax(name, size, args)
    rows.append(row)
    print("\n".join(jax_lines(row)), flush=True)
    row["cached_anchor"] = cached_anchor(row)
    if row["cached_anchor"]:
        print(f"{'':9s} cached anchor (an earlier session's, not measured now): {row['cached_anchor']}", flush=True)
    write_json(args.json, args.tiny, rows)
    row["torch_skipped"] = "--no-torch" if args.no_torch else torch_missing()
    if row["torch_skipped"]:
        print(f"{'':9s} torch: {row['torch_skipped']}", flush=True)
        return row
    for mode in args.modes:
        log(f"{name}: PyTorch anchor, {mode}")
        anchor = bench_torch_mode(name, row["input_shape"], row["classes"], row["batch"], args.steps, args.warmup,
                                  args.repeats, mode)
        row["torch"].append(add_rates(anchor, row["flops_per_step"], row["peak_flops"], row["batch"]))
        print("\n".join(anchor_lines(row, anchor)), flush=True)
        write_json(args.json, args.tiny, rows)
    if summary_line(row):
        print(summary_line(row), flush=True)
    return row


def main(argv=None) -> int:
    try:
        args = parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    if args.replicas > 1:
        os.environ.setdefault("JAX_NUM_CPU_DEVICES", str(args.replicas))  # only matters on CPU

    import jax

    dev = jax.devices()[0]
    print(f"device: {dev.device_kind} ({dev.platform}), jax {jax.__version__}, bf16 compute / fp32 params, "
          f"{args.steps} steps x {args.repeats} repeats after {args.warmup} warm-up"
          + (" [TINY: smoke test, not a measurement]" if args.tiny else ""), flush=True)
    print(HEADER + "\n" + "-" * len(HEADER), flush=True)
    rows: list[dict] = []
    for name in args.names:   # each line out as soon as it is measured
        run_model(name, "tiny" if args.tiny else "full", args, rows)
    if len(rows) > 1:
        print("\n" + format_table(rows))
    if args.json == "-":
        print(json.dumps({"tiny": args.tiny, "rows": rows}, indent=2, default=float))
    bad = [r["model"] for r in rows if not all(math.isfinite(r[v]["steps_per_s"]) for v in ("jax", "jaxsel"))]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
