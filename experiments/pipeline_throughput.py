"""Input pipeline throughput alone (no model): can the loader keep an accelerator fed?

CIFAR-shaped mock data (uint8 32x32x3, 10 classes, in memory, or behind a random-access
source read with `__getitems__` like a TFDS ArrayRecord source) goes through jaxsel's
loader, stage by stage, and each stage's samples/s is printed:

  host      index -> gather batches on the host (`workers` threads, `prefetch` ahead)
  device    + placed on the mesh a step ahead (prefetch_to_device), waited for
  augment   + the on-device random crop / flip / normalise, waited for

    python experiments/pipeline_throughput.py                    # 8 replicas x 32, 200 steps
    python experiments/pipeline_throughput.py --records --workers 4
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


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replicas", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=32, help="per replica")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--examples", type=int, default=50_000)
    p.add_argument("--workers", type=int, default=2, help="host threads building batches")
    p.add_argument("--prefetch", type=int, default=2)
    p.add_argument("--records", action="store_true", help="read per record (random access) instead of in memory")
    args = p.parse_args(argv)
    request_cpu_devices(max(8, args.replicas))
    import jax

    dev = jax.devices()[0]
    source = "per-record source" if args.records else "in-memory arrays"
    print(f"pipeline: {args.replicas} replicas x {args.batch_size} CIFAR-shaped samples, {source}, "
          f"{args.workers} workers, on {jax.device_count()} x {dev.platform} ({dev.device_kind})", flush=True)
    run(args.replicas, args.batch_size, args.steps, args.examples, args.workers, args.prefetch, args.records)


if __name__ == "__main__":
    main()
