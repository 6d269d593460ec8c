"""Input pipeline throughput alone (no model): can the loader keep an accelerator fed?

CIFAR-shaped mock data (uint8 32x32x3, 10 classes, in memory, or behind a random-access
source read with `__getitems__` like a TFDS ArrayRecord source) goes through jaxsel's
loader, stage by stage, and each stage's samples/s is printed:

  host      index -> gather batches on the host (`workers` threads, then `workers` Grain
            worker processes, `prefetch` ahead)
  device    + placed on the mesh a step ahead (prefetch_to_device), waited for
  augment   + the on-device random crop / flip / normalise, waited for

Each rate is of one stream after two warm-up batches (threads or worker processes started).

    python experiments/pipeline_throughput.py                    # 8 replicas x 32, 200 steps
    python experiments/pipeline_throughput.py --records --workers 4
    python experiments/pipeline_throughput.py --jpeg 2000    # JPEG-encoded ImageNet-style records

`--jpeg N` writes N synthetic 224x224 JPEGs as an ImageNet-style image folder, prepares
them with `jaxsel prepare imagenet2012` (the image-folder route) and reads them back the
way training does (TFDS data source -> JPEG decode -> loader -> device -> augment): with
the threaded loader and with Grain worker processes, 1 and `--workers` of each, and says
whether per-core rate x host cores reaches an accelerator's training rate.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jaxsel.core.parallel import request_cpu_devices


class ListSource:
    """A random-access source of per-example dicts (stands in for a TFDS data source)."""

    def __init__(self, images, labels):
        self.images, self.labels = images, labels

    def __len__(self):
        return len(self.labels)

    def __getitems__(self, keys):
        return [{"image": self.images[k], "label": self.labels[k]} for k in keys]


def warmup(workers: int, prefetch: int) -> int:
    """Batches to take before the clock starts: 2, plus every batch the loader may hold
    ready (each worker's buffer and the one it is building), so the rate is the steady
    one, not a drained buffer's."""
    return 2 + workers * (prefetch + 1) + 1


def stream_rate(batches, steps: int, per_step: int, warmup: int, wait=None) -> float:
    """Samples/s of one stream of batches after `warmup` batches: worker threads or
    processes are started and warm, and their buffers drained, before the clock starts
    (a run pays the start once)."""
    for _ in range(warmup):
        next(batches)
    t0 = time.perf_counter()
    last = None
    for _ in range(steps):
        last = next(batches)
    if wait is not None:
        wait(last)
    rate = steps * per_step / (time.perf_counter() - t0)
    batches.close()
    return rate


def report(out: dict, name: str, rate: float, unit: str = "samples/s") -> None:
    out[name] = rate
    print(f"{name:>34}: {rate:>10,.0f} {unit}", flush=True)


def run(replicas: int = 8, batch_size: int = 32, steps: int = 200, examples: int = 50_000,
        workers: int = 2, prefetch: int = 2, records: bool = False) -> dict[str, float]:
    import jax
    import numpy as np

    import jaxsel
    from jaxsel.data import Loader, seldp
    from jaxsel.data.augment import make_device_transform
    from jaxsel.data.catalog import CATALOG
    from jaxsel.data.records import RecordTable

    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(examples, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, size=examples).astype(np.int64)
    spec = CATALOG["cifar10"]
    table = RecordTable(ListSource(images, labels), spec) if records else {"image": images, "label": labels}
    mesh = jaxsel.data_mesh(replicas)
    part = seldp(examples, replicas, seed=0)
    transform = make_device_transform(spec, mesh, seed=0, augment=True, replicas=replicas)
    per_step, out, warm = replicas * batch_size, {}, warmup(workers, prefetch)
    n = warm + steps
    for processes in (False, True):
        host = Loader(table, part, batch_size, workers=workers, processes=processes)
        report(out, f"host, {host.describe()}", stream_rate(host.host_batches(0, n, prefetch), steps, per_step, warm))
    dev = Loader(table, part, batch_size, mesh=mesh, workers=workers, device_prefetch=prefetch)
    report(out, "+ device", stream_rate(dev.iterate(0, n, prefetch), steps, per_step, warm,
                                        wait=lambda b: jax.block_until_ready(b[1])))
    augmented = ((t, transform(b, np.int32(t))) for t, b in dev.iterate(0, n, prefetch))
    report(out, "+ augment", stream_rate(augmented, steps, per_step, warm,
                                         wait=lambda b: jax.block_until_ready(b[1])))
    return out


H100_RESNET50_IMAGES_S = 5150   # ResNet-50, bf16, batch 128, jaxsel's BSP step on one H100


def write_jpeg_folder(root: Path, count: int, classes: int = 10, seed: int = 0) -> Path:
    """`count` 224x224 JPEGs (smooth gradients plus noise: closer to photos than pure noise)
    under root/train/<synset>/, once; returns root."""
    import numpy as np
    import tensorflow_datasets as tfds
    from PIL import Image

    if (root / "done").exists():
        return root
    synsets = tfds.builder_cls("imagenet2012")(data_dir=str(root / "probe")).info.features["label"].names
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:224, 0:224]
    for i in range(count):
        base = np.stack([(xx * rng.uniform(0.3, 1.1) + yy * rng.uniform(0.3, 1.1) + rng.uniform(0, 255)) % 256
                         for _ in range(3)], -1)
        pixels = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
        folder = root / "train" / synsets[i % classes]
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels).save(folder / f"{synsets[i % classes]}_{i}.JPEG", quality=90)
    (root / "done").write_text("")
    return root


def run_jpeg(count: int, work: Path, replicas: int = 8, batch_size: int = 32, steps: int = 20,
             workers: int = 2, prefetch: int = 2, repeats: int = 3) -> dict[str, float]:
    """Images/s of JPEG-encoded records: decoded on the host by the threaded loader and by
    Grain worker processes (1 and `workers` of each), then augmented on the devices."""
    import os

    import jax
    import numpy as np

    import jaxsel
    from jaxsel.data import Loader, seldp
    from jaxsel.data.augment import make_device_transform
    from jaxsel.data.catalog import CATALOG
    from jaxsel.data.pipeline import open_table
    from jaxsel.data.prepare import prepare

    folder = write_jpeg_folder(work / f"jpeg{count}", count)
    prepare("imagenet2012", folder, work / f"tfds{count}", progress=False, quiet=True)
    spec = CATALOG["imagenet2012"]
    table = open_table(spec, "train", work / f"tfds{count}")
    mesh = jaxsel.data_mesh(replicas)
    part = seldp(len(table), replicas, seed=0)
    transform = make_device_transform(spec, mesh, seed=0, augment=True, replicas=replicas)
    per_step, out, warm = replicas * batch_size, {}, warmup(workers, prefetch)
    n = warm + steps
    loaders = [Loader(table, part, batch_size, workers=w, processes=p) for p in (False, True)
               for w in sorted({1, workers})]
    rates: dict[str, list[float]] = {f"decode, {ld.describe()}": [] for ld in loaders}
    for _ in range(repeats):   # interleaved: a shared machine's load falls on every variant alike
        for ld in loaders:
            rate = stream_rate(ld.host_batches(0, n, prefetch), steps, per_step, warm)
            rates[f"decode, {ld.describe()}"].append(rate)
    for name, rs in rates.items():
        report(out, name, float(np.median(rs)), f"images/s  (median of {repeats}; {min(rs):,.0f}-{max(rs):,.0f})")
    dev = Loader(table, part, batch_size, mesh=mesh, workers=workers, device_prefetch=prefetch, processes=True)
    augmented = ((t, transform(b, np.int32(t))) for t, b in dev.iterate(0, n, prefetch))
    report(out, f"+ augment, {dev.describe()}", stream_rate(augmented, steps, per_step, warm,
                                                            wait=lambda b: jax.block_until_ready(b[1])), "images/s")
    per_core = out["decode, 1 loader thread"]
    print(f"{workers} threads: {out[f'decode, {workers} loader threads'] / per_core:.2f}x one thread (the GIL); "
          f"{workers} Grain processes: {out[f'decode, {workers} Grain worker processes'] / per_core:.2f}x",
          flush=True)
    for cores, gpus in ((16, 1), (96, 8)):
        need = H100_RESNET50_IMAGES_S * gpus
        verdict = "enough" if per_core * cores >= need else "NOT enough"
        print(f"per-core decode {per_core:,.0f}/s x {cores} cores = {per_core * cores:,.0f}/s vs "
              f"{need:,}/s for {gpus} H100(s): {verdict} with {cores} worker processes "
              f"(224x224 JPEGs; this host: {os.cpu_count()} cores)", flush=True)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replicas", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=32, help="per replica")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--examples", type=int, default=50_000)
    p.add_argument("--workers", type=int, default=2, help="host threads / Grain processes building batches")
    p.add_argument("--prefetch", type=int, default=2)
    p.add_argument("--records", action="store_true", help="read per record (random access) instead of in memory")
    p.add_argument("--jpeg", type=int, default=0, metavar="N",
                   help="measure N synthetic 224x224 JPEG records (image-folder route) instead")
    p.add_argument("--repeats", type=int, default=3, help="--jpeg: interleaved repeats of each loader (medians)")
    p.add_argument("--work-dir", default="/tmp/jaxsel-pipeline-jpeg", help="where --jpeg writes its files")
    args = p.parse_args(argv)
    request_cpu_devices(max(8, args.replicas))
    import jax

    dev = jax.devices()[0]
    if args.jpeg:
        print(f"pipeline: {args.replicas} replicas x {args.batch_size} JPEG 224x224 records, "
              f"on {jax.device_count()} x {dev.platform} ({dev.device_kind})", flush=True)
        run_jpeg(args.jpeg, Path(args.work_dir), args.replicas, args.batch_size, args.steps,
                 args.workers, args.prefetch, args.repeats)
        return
    source = "per-record source" if args.records else "in-memory arrays"
    print(f"pipeline: {args.replicas} replicas x {args.batch_size} CIFAR-shaped samples, {source}, "
          f"{args.workers} workers, on {jax.device_count()} x {dev.platform} ({dev.device_kind})", flush=True)
    run(args.replicas, args.batch_size, args.steps, args.examples, args.workers, args.prefetch, args.records)


if __name__ == "__main__":
    main()
