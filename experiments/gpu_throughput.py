"""Training throughput and MFU of jaxsel's ResNets on one accelerator, beside PyTorch.

Why: SelSync's claims are wall-clock claims, so the per-step compute that the cost model
(`jaxsel.costmodel`) multiplies must be competitive. This script measures, for ResNet-18 on
CIFAR-shaped batches (32x32) and ResNet-50 on 224x224:

  jax     a plain jitted train step (value_and_grad + optax SGD-momentum), no framework;
  jaxsel  jaxsel's BSP step (`make_train_step`) on a mesh of `--replicas` devices;
  torch   the same architecture in PyTorch: torch.compile, channels_last, bf16 autocast
          (only when torch is importable; torchvision is not needed).

Mixed precision everywhere: parameters and BatchNorm statistics fp32, compute bf16 (Flax
modules get `dtype=bfloat16`; torch uses autocast). Model FLOPs per step are counted from
the forward pass's program (`jaxsel.flops`: every matmul and convolution, 2 FLOPs per
multiply-add, x 3 for forward + backward: ResNet-50 is 4.1 GMACs per 224x224 image, so
~3,150 GFLOP per step at batch 128) and serve for torch too (same model). XLA's
`cost_analysis()` is kept as `xla_flops_per_step` for reference only: on GPUs it leaves out
the cuDNN/cuBLAS calls and undercounts by one to two orders of magnitude.
MFU = model FLOPs/step * steps/s / peak bf16 FLOP/s. Each model's row is printed (and
the JSON rewritten) as soon as it is measured, so a time limit loses only the model in hand.

  python experiments/gpu_throughput.py                 # on a GPU machine
  python experiments/gpu_throughput.py --tiny          # CPU smoke test at toy sizes
  python experiments/gpu_throughput.py --json out.json --models resnet50 --batch 128
"""
from __future__ import annotations

import argparse
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


def bf16_model(name: str, input_shape, classes: int, seed: int = 0):
    """A jaxsel model whose layers compute in bf16 while their parameters stay fp32."""
    import jax.numpy as jnp
    from flax import nnx

    from jaxsel.models import FunctionalModel, build_model

    model = build_model(name, input_shape, classes, seed)
    for _, module in nnx.iter_modules(model):
        if isinstance(module, (nnx.Conv, nnx.Linear, nnx.BatchNorm)):
            module.dtype = jnp.bfloat16
    return FunctionalModel.from_module(model)


def mixed_precision_loss(fm):
    """loss(params, model_state, batch) -> (fp32 loss, model state cast back to its dtypes)."""
    import jax
    import jax.numpy as jnp
    import optax

    def loss_fn(params, model_state, batch):
        logits, new_state = fm.apply(params, model_state, batch["image"].astype(jnp.bfloat16), train=True)
        new_state = jax.tree.map(lambda new, old: new.astype(old.dtype), new_state, model_state)
        loss = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), batch["label"]).mean()
        return loss, new_state

    return loss_fn


def bench_jax(name: str, input_shape, classes: int, batch: int, steps: int, warmup: int, repeats: int,
              replicas: int) -> dict:
    """Images/s and FLOPs of the plain JAX step and of jaxsel's BSP step."""
    import jax
    import numpy as np
    import optax

    import jaxsel
    from jaxsel.flops import training_flops
    from jaxsel.models import count_params

    fm = bf16_model(name, input_shape, classes)
    loss_fn = mixed_precision_loss(fm)
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
    ts = jaxsel.init_state(fm.params, opt, strat, mesh, fm.model_state)
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


def bench_torch(name: str, input_shape, classes: int, batch: int, steps: int, warmup: int, repeats: int,
                compile_model: bool) -> dict:
    import torch

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model = torch_resnet(name, classes, input_shape).to(dev).to(memory_format=torch.channels_last)
    out = {"torch_version": torch.__version__, "torch_params": sum(p.numel() for p in model.parameters()),
           "torch_device": torch.cuda.get_device_name() if dev == "cuda" else "cpu"}
    h, w, c = input_shape
    x = torch.randn(batch, c, h, w, device=dev).to(memory_format=torch.channels_last)
    y = torch.randint(0, classes, (batch,), device=dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    fwd = model
    out["torch_compiled"] = False
    if compile_model:
        try:
            fwd = torch.compile(model)
            out["torch_compiled"] = True
        except Exception as e:  # noqa: BLE001 - report and fall back to eager
            out["torch_compile_error"] = repr(e)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    loss_fn = torch.nn.CrossEntropyLoss()

    def run(n):
        for _ in range(n):
            opt.zero_grad(set_to_none=True)
            with torch.autocast(dev, dtype=torch.bfloat16):
                loss = loss_fn(fwd(x), y)
            loss.backward()
            opt.step()
        sync()

    model.train()
    try:
        run(warmup)
    except Exception as e:  # noqa: BLE001 - e.g. no C++ compiler for inductor: retry eager
        if not out["torch_compiled"]:
            raise
        out["torch_compile_error"] = repr(e)[:500]
        out["torch_compiled"], fwd = False, model
        run(warmup)
    out["torch_steps_per_s"] = timed_throughput(run, steps, repeats)
    return out


# ----------------------------------------------------------------------------- main


def measure(name: str, size: str, args) -> dict:
    cfg = dict(WORKLOADS[name][size])
    if args.batch:
        cfg["batch"] = args.batch
    row = {"model": name, "input_shape": list(cfg["input_shape"]), "classes": cfg["classes"], "batch": cfg["batch"],
           "replicas": args.replicas}
    log(f"{name}: JAX and jaxsel steps, batch {cfg['batch']}, input {cfg['input_shape']}")
    row.update(bench_jax(name, cfg["input_shape"], cfg["classes"], cfg["batch"], args.steps, args.warmup,
                         args.repeats, args.replicas))
    peak = peak_flops(row["device_kind"], args.peak_tflops)
    flops = row["flops_per_step"]
    row["peak_flops"] = peak
    variants = ["jax", "jaxsel"]
    if not args.no_torch:
        try:
            import torch  # noqa: F401
        except ImportError:
            row["torch_skipped"] = "torch is not importable"
        else:
            log(f"{name}: PyTorch step ({'eager' if args.no_compile else 'torch.compile'})")
            row.update(bench_torch(name, cfg["input_shape"], cfg["classes"], cfg["batch"], args.steps,
                                   args.warmup, args.repeats, not args.no_compile))
            variants.append("torch")
    for v in variants:
        sps = row[f"{v}_steps_per_s"]
        per_step_images = cfg["batch"] * (args.replicas if v == "jaxsel" else 1)
        row[f"{v}_images_per_s"] = sps * per_step_images
        # jaxsel's step runs `replicas` copies of the model; MFU is per device
        row[f"{v}_mfu"] = flops * sps / peak if (flops and peak) else None
    return row


def format_table(rows: list[dict]) -> str:
    head = f"{'model':9s} {'input':>11s} {'batch':>5s} {'variant':7s} {'images/s':>10s} {'ms/step':>9s} " \
           f"{'GFLOP/step':>10s} {'MFU':>6s}"
    lines = [head, "-" * len(head)]
    for r in rows:
        flops = r["flops_per_step"]
        for v in ("jax", "jaxsel", "torch"):
            if f"{v}_steps_per_s" not in r:
                continue
            mfu = r[f"{v}_mfu"]
            shape = "x".join(str(d) for d in r["input_shape"])
            lines.append(f"{r['model']:9s} {shape:>11s} {r['batch']:5d} {v:7s} {r[f'{v}_images_per_s']:10.1f} "
                         f"{1e3 / r[f'{v}_steps_per_s']:9.2f} {(flops or float('nan')) / 1e9:10.2f} "
                         f"{'n/a' if mfu is None else f'{100 * mfu:5.1f}%':>6s}")
        if "torch_skipped" in r:
            lines.append(f"{'':9s} torch: {r['torch_skipped']}")
        elif r.get("torch_compile_error"):
            lines.append(f"{'':9s} torch.compile failed, eager used: {r['torch_compile_error'][:120]}")
        if r.get("torch_params") and r["torch_params"] != r["params"]:
            lines.append(f"{'':9s} WARNING: parameter counts differ (jax {r['params']}, torch {r['torch_params']})")
    return "\n".join(lines)


def main(argv=None) -> int:
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
    p.add_argument("--no-compile", action="store_true", help="run PyTorch eagerly (no torch.compile)")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the results as JSON ('-' = stdout)")
    args = p.parse_args(argv)
    size = "tiny" if args.tiny else "full"
    args.steps = args.steps or (2 if args.tiny else 50)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.tiny else 10)
    args.repeats = args.repeats or (1 if args.tiny else 5)
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in names if m not in WORKLOADS]
    if unknown:
        p.error(f"unknown model(s) {unknown}; choose from {', '.join(WORKLOADS)}")
    if args.replicas > 1:
        os.environ.setdefault("JAX_NUM_CPU_DEVICES", str(args.replicas))  # only matters on CPU

    import jax

    dev = jax.devices()[0]
    print(f"device: {dev.device_kind} ({dev.platform}), jax {jax.__version__}, bf16 compute / fp32 params, "
          f"{args.steps} steps x {args.repeats} repeats after {args.warmup} warm-up"
          + (" [TINY: smoke test, not a measurement]" if args.tiny else ""), flush=True)
    rows = []
    for name in names:   # each row out as soon as it is measured
        rows.append(measure(name, size, args))
        print(format_table(rows[-1:]), flush=True)
        if args.json and args.json != "-":
            with open(args.json, "w") as f:
                f.write(json.dumps({"tiny": args.tiny, "rows": rows}, indent=2, default=float))
    if len(rows) > 1:
        print("\n" + format_table(rows))
    if args.json == "-":
        print(json.dumps({"tiny": args.tiny, "rows": rows}, indent=2, default=float))
    bad = [r["model"] for r in rows if not all(math.isfinite(r[f"{v}_steps_per_s"]) for v in ("jax", "jaxsel"))]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
