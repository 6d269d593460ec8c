"""Input pipeline throughput alone (no model): can the loader keep an accelerator fed?

CIFAR-shaped mock data (uint8 32x32x3, 10 classes, in memory, or behind a random-access
source read with `__getitems__` like a TFDS ArrayRecord source) goes through jaxsel's
loader, stage by stage, and each stage's samples/s is printed:

  host      index -> gather batches on the host (`workers` threads, `prefetch` ahead)
  device    + placed on the mesh a step ahead (prefetch_to_device), waited for
  augment   + the on-device random crop / flip / normalise, waited for

    python experiments/pipeline_throughput.py                    # 8 replicas x 32, 200 steps
    python experiments/pipeline_throughput.py --records --workers 4
    python experiments/pipeline_throughput.py --jpeg 2000    # JPEG-encoded ImageNet-style records

`--jpeg N` writes N synthetic 224x224 JPEGs as an ImageNet-style image folder, prepares
them with `jaxsel prepare imagenet2012` (the image-folder route) and reads them back the
way training does (TFDS data source -> JPEG decode -> loader -> device -> augment), first
with one worker thread (the per-core rate), then with `--workers`, and says whether
per-core rate x host cores reaches an accelerator's training rate.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jaxsel.parallel import request_cpu_devices


class ListSource:
    """A random-access source of per-example dicts (stands in for a TFDS data source)."""

    def __init__(self, images, labels):
        self.images, self.labels = images, labels

    def __len__(self):
        return len(self.labels)

    def __getitems__(self, keys):
        return [{"image": self.images[k], "label": self.labels[k]} for k in keys]


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
    transform = make_device_transform(spec, mesh, seed=0, augment=True)
    per_step = replicas * batch_size
    out = {}

    def timed(name, consume):
        consume(2)                               # warm-up: threads, compilation
        t0 = time.perf_counter()
        consume(steps)
        dt = time.perf_counter() - t0
        out[name] = steps * per_step / dt
        print(f"{name:>8}: {out[name]:>10,.0f} samples/s  ({steps / dt:,.1f} steps/s)", flush=True)

    host = Loader(table, part, batch_size, workers=workers)
    timed("host", lambda n: [b for _, b in host.host_batches(0, n, prefetch)])

    dev = Loader(table, part, batch_size, mesh=mesh, workers=workers, device_prefetch=prefetch)

    def device(n):
        last = None
        for _, b in dev.iterate(0, n, prefetch):
            last = b
        jax.block_until_ready(last)

    timed("device", device)

    def augmented(n):
        last = None
        for t, b in dev.iterate(0, n, prefetch):
            last = transform(b, np.int32(t))
        jax.block_until_ready(last)

    timed("augment", augmented)
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


def _decode_share(args) -> int:
    """One worker process: open the source itself and decode its share of the records."""
    data_dir, start, stop, chunk = args
    import tensorflow_datasets as tfds

    source = tfds.data_source("imagenet2012", split="train", data_dir=str(data_dir))
    for i in range(start, stop, chunk):
        source.__getitems__(list(range(i, min(i + chunk, stop))))
    return stop - start


def decode_in_processes(data_dir: Path, count: int, processes: int, chunk: int = 32) -> float:
    """Images/s decoded by `processes` worker processes (what Grain's workers do): no GIL."""
    import multiprocessing as mp

    shares = [(data_dir, count * k // processes, count * (k + 1) // processes, chunk) for k in range(processes)]
    with mp.get_context("spawn").Pool(processes) as pool:
        pool.map(_decode_share, [(data_dir, 0, chunk, chunk)] * processes)   # warm-up: imports
        t0 = time.perf_counter()
        done = sum(pool.map(_decode_share, shares))
        return done / (time.perf_counter() - t0)


def run_jpeg(count: int, work: Path, replicas: int = 8, batch_size: int = 32, steps: int = 20,
             workers: int = 2, prefetch: int = 2) -> dict[str, float]:
    """Images/s of JPEG-encoded records: decoded on the host, then augmented on the devices."""
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
    transform = make_device_transform(spec, mesh, seed=0, augment=True)
    per_step = replicas * batch_size
    out = {}

    def timed(name, consume):
        consume(1)
        t0 = time.perf_counter()
        consume(steps)
        out[name] = steps * per_step / (time.perf_counter() - t0)
        print(f"{name:>24}: {out[name]:>8,.0f} images/s", flush=True)

    for w in sorted({1, workers}):
        host = Loader(table, part, batch_size, workers=w)
        timed(f"decode, {w} worker(s)", lambda n: [b for _, b in host.host_batches(0, n, prefetch)])
    dev = Loader(table, part, batch_size, mesh=mesh, workers=workers, device_prefetch=prefetch)

    def augmented(n):
        last = None
        for t, b in dev.iterate(0, n, prefetch):
            last = transform(b, np.int32(t))
        jax.block_until_ready(last)

    timed(f"+ augment, {workers} worker(s)", augmented)
    for procs in sorted({1, os.cpu_count() or 1}):
        out[f"decode, {procs} process(es)"] = rate = decode_in_processes(work / f"tfds{count}", count, procs)
        print(f"{f'decode, {procs} process(es)':>24}: {rate:>8,.0f} images/s", flush=True)
    per_core = out["decode, 1 worker(s)"]
    threads = out[f"decode, {workers} worker(s)"] / per_core
    print(f"threads scale {threads:.2f}x with {workers} workers (the GIL): a threaded loader stays near "
          f"one core's rate; per-core x cores needs worker processes (Grain)", flush=True)
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
    p.add_argument("--workers", type=int, default=2, help="host threads building batches")
    p.add_argument("--prefetch", type=int, default=2)
    p.add_argument("--records", action="store_true", help="read per record (random access) instead of in memory")
    p.add_argument("--jpeg", type=int, default=0, metavar="N",
                   help="measure N synthetic 224x224 JPEG records (image-folder route) instead")
    p.add_argument("--work-dir", default="/tmp/jaxsel-pipeline-jpeg", help="where --jpeg writes its files")
    args = p.parse_args(argv)
    request_cpu_devices(max(8, args.replicas))
    import jax

    dev = jax.devices()[0]
    if args.jpeg:
        print(f"pipeline: {args.replicas} replicas x {args.batch_size} JPEG 224x224 records, "
              f"on {jax.device_count()} x {dev.platform} ({dev.device_kind})", flush=True)
        run_jpeg(args.jpeg, Path(args.work_dir), args.replicas, args.batch_size, args.steps,
                 args.workers, args.prefetch)
        return
    source = "per-record source" if args.records else "in-memory arrays"
    print(f"pipeline: {args.replicas} replicas x {args.batch_size} CIFAR-shaped samples, {source}, "
          f"{args.workers} workers, on {jax.device_count()} x {dev.platform} ({dev.device_kind})", flush=True)
    run(args.replicas, args.batch_size, args.steps, args.examples, args.workers, args.prefetch, args.records)


if __name__ == "__main__":
    main()
