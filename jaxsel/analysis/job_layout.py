"""Where a job that batches its cells puts the replicas on a CPU: all on one device.

jaxsel makes 8 CPU devices so that a run on one CPU computes its replicas on real
collectives. Those devices are threads of one process sharing the machine's cores, and
every collective of a step waits until each of them has been scheduled: one cell's cost
that a batch of cells pays at every step and every replica read. Packed on one device,
the replicas of every cell are a vmap, and the collectives reduce within the device.
Measured on a 2-core machine (BENCHMARKS.md, "A batch's replicas on one CPU device"): the
default job took 0.80-0.92 of its time on 8 devices, the frontier 0.87, each with a third
of the system time (the 8 threads' hand-overs). A convolution is the exception: a vmap over
the replicas' kernels makes it a grouped convolution, which XLA:CPU computes slower (the
digits CNN's `jaxsel compare` took 161 s packed against 100 s on 8 devices), so a model
with one keeps its devices.

So a job (`jaxsel compare`, `jaxsel frontier`) that batches its cells packs its replicas
on one CPU device, computed by vmap, when neither `--devices` nor `--packing` was given,
its replicas go to several CPU devices of one process, and its model has no convolution.
The rule reads the settings, the model and the device count, never a timing, so every
shard and every resume of a job picks the same layout and a CPU job stays reproducible
bit for bit. `--no-batch-cells` keeps the layout as set: one by one is what a batch is
measured against, and its cells reproduce `jaxsel train`'s.

Such a job's process starts JAX with one CPU device (`packs_before_start`, read from the
settings before JAX starts; `cli.common.start_job_jax`): XLA's pool of threads that execute
programs has a thread per CPU device, 8 on a 2-core machine for one device's work (the
frontier: the same bits in 0.92 of the time and 0.85 of the memory, BENCHMARKS.md, "Where
the frontier's time goes"). The rule then counts the devices a run would have spread over.
"""
from __future__ import annotations

import dataclasses

from ..training.config import TrainConfig

#: how the packed replicas are computed (a vmap: the unrolled loop puts 8 copies of the
#: step into every batch's program, measured 2.4x the time to trace and compile it)
LOOP = "vmap"


def why_not_packed(cfg: TrainConfig) -> str | None:
    """Why `cfg`'s batches keep its layout (None: they pack on one CPU device)."""
    from ..training.plan import layout_of

    return why_kept(cfg.placement, layout_of(cfg), lambda: has_convolution(cfg.data, cfg.optim))


def why_kept(placement, layout, convolutional) -> str | None:
    """The rule, on the `[replicas]` section, the layout it gives and a test of the model."""
    from ..core.parallel import one_cpu_device_for_packing
    from ..training import distributed

    if placement.devices is not None or placement.packing != "auto":
        return "the layout was given"
    if layout.devices[0].platform != "cpu" or (len(layout.devices) < 2 and not one_cpu_device_for_packing()):
        return "not several CPU devices"
    if distributed.is_multiprocess():
        return "several processes"
    if convolutional():
        return "the model has a convolution"
    return None


def has_convolution(data, optim) -> bool:
    """Whether the model of the `[data]` and `[optim]` sections has a convolution layer
    (built abstractly: nothing computed)."""
    from flax import nnx

    from ..data.pipeline import input_shape_and_classes
    from ..data.sources import spec_of
    from ..models import build_model

    shape, classes = input_shape_and_classes(spec_of(data.dataset), None, data.data_dir,
                                             dict(data.dataset_options or {}))
    model = nnx.eval_shape(lambda: build_model(optim.model, shape, classes))
    return any(isinstance(node, (nnx.Conv, nnx.ConvTranspose)) for _, node in nnx.iter_graph(model))


def packs_before_start(cfg: TrainConfig, batch_cells: bool) -> bool:
    """Whether the job of `cfg` will pack its replicas on one CPU device, told from its
    settings before JAX starts (the rule, where jaxsel makes one CPU device per replica, 8
    at least): its process then starts with one (`core.parallel.
    request_one_cpu_device_for_packing`)."""
    placement = cfg.placement
    return (batch_cells and placement.devices is None and placement.packing == "auto" and placement.replicas >= 2
            and placement.platform in (None, "cpu") and not has_convolution(cfg.data, cfg.optim))


def job_layout(cfg: TrainConfig, batch_cells: bool) -> TrainConfig:
    """The job's settings with its replicas packed on one CPU device where its batches gain
    by it (module docstring); else `cfg` as it is."""
    if not batch_cells or why_not_packed(cfg) is not None:
        return cfg
    return dataclasses.replace(cfg, devices=1, packing=LOOP)


def packed_note(cfg: TrainConfig, given: TrainConfig) -> str:
    """What the job's layout line adds where the job packed the replicas `given` put on
    several devices (`cfg`: the job's settings)."""
    from ..training.plan import layout_of

    if cfg == given:
        return ""
    from ..core.parallel import one_cpu_device_for_packing

    devices = given.placement.replicas if one_cpu_device_for_packing() else len(layout_of(given).devices)
    return (f", packed by {LOOP} (a job that batches its cells packs its replicas on one CPU device; "
            f"--devices {devices} or --no-batch-cells put one on each of {devices})")
