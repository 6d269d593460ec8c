"""Run assembly: everything a training run is made of, built once from its plan.

A run's plan (plan.py) holds its checked settings, layout, data and strategy; this module
holds what the plan is made with (`resumed_settings`, `make_layout`, `make_strategy` (the
strategy is built there and nowhere else), `start_warnings`, `check_paths`) and what a run adds to it
(`assemble_run`): the model, the optimizer, the estimate of its memory and disk (the last
checks), the initial state, the jitted step and the evaluation. The three places that talk
to the strategy layer beyond building it are `strategy_timing`, `describe_strategy` and
`evaluation_weights`.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np

from ..core import packing, parallel
from ..compat.renamed_options import read_renamed
from ..core.aggregate import Aggregator, WithFaultyReplicas
from ..core.state import consensus, consensus_model_state, init_state
from ..core.step import make_train_step, resolve_packing
from ..costmodel.timing import strategy_timing
from ..data import Loader
from ..data.paths import writable_dir
from ..data.sources import KNOWN, check_prepared
from ..models import FunctionalModel, build_model
from ..strategies import STRATEGIES, build_strategy
from . import distributed
from .checkpoint import existing_steps, newest_meta
from .rundir.owner import (claim, clear_partial_forks, foreign_owner, fork, fork_root, fork_source, not_jaxsels,
                           records)
from .config import ConfigError, TrainConfig, default_checkpoint_name
from .evaluation import make_eval_fn
from .grad_clip import with_clipped_gradients
from .lr_schedule import RunSamples, never_fires_warning
from .numbers import byte_size
from .optim import build_optimizer
from .run_kinds import refuse_comparison, refuse_job_cell
from .rundir import CHECKPOINTS_DIR, OWNER_FILE, RUN_RECORDS, RunDir
from .rundir.links import refuse_links
from .rundir.records import read_record
from .sync_horizon import all_warmup_warning, never_syncs_warning


@dataclasses.dataclass
class Run:
    """Everything a training run is made of, built from its plan."""

    cfg: TrainConfig
    mesh: Any
    fm: FunctionalModel
    optimizer: Any
    strategy: Any
    state: Any
    step_fn: Any
    loader: Loader
    test: dict
    evaluate: Any
    timing: dict          # the strategy's cost-model keywords (`strategy_timing`)
    description: str      # the strategy as the run reports it (`describe_strategy`)
    layout: str           # where the replicas run and how packed ones are computed, printed and recorded
    packing_choice: dict | None = None   # the packing that runs (`packing.Choice.record`); None: one per device
    samples: RunSamples | None = None   # b, N and the training set's examples (a `sample-epochs` schedule's count)
    plan: Any = None      # the plan it was built from (plan.RunPlan)
    train_step: Any = None   # the step as made (core/step.py), before the data transform: a cell batch vmaps it


def assemble_run(plan) -> Run:
    """The run of a plan (plan.RunPlan: checked settings, layout, data, strategy): the model,
    the optimizer, the memory and disk estimates (its last checks: nothing is created before
    them), the initial state, the step."""
    cfg, layout, data, strategy, samples = plan.cfg, plan.layout, plan.data, plan.strategy, plan.samples
    mesh = layout.mesh
    spec, loader = data.spec, data.loader
    opt = cfg.optim
    model = build_model(opt.model, data.input_shape, data.num_classes, seed=opt.seed)
    fm = FunctionalModel.from_module(model)
    at_update = opt.clip_norm if opt.clip_at == "update" else None
    optimizer = build_optimizer(opt.optimizer, opt.lr, opt.momentum, opt.weight_decay, at_update,
                                lr_schedule=opt.lr_schedule, total_steps=opt.lr_schedule_length, samples=samples)
    check_resources(cfg, estimate_resources(cfg, fm, optimizer, strategy, mesh, data.input_shape), mesh)
    state = init_state(fm.params, optimizer, strategy, mesh, model_state=fm.model_state,
                       replicas=cfg.placement.replicas)
    loss_fn = with_clipped_gradients(fm.classification_loss(spec.input_key, spec.label_key),
                                     opt.clip_norm if opt.clip_at == "gradients" else None)
    # grad_norm every step: the non-finite policies check each step's gradients (faults.py)
    train_step = make_train_step(loss_fn, optimizer, strategy, mesh, stateful=fm.stateful,
                                 packing=cfg.placement.packing, grad_norm_metric=True)
    choice = choose_packing(cfg, train_step, state, data, layout)
    return Run(cfg, mesh, fm, optimizer, strategy, state, data.wrap_step(train_step), loader, data.test,
               make_eval_fn(fm, spec), strategy_timing(strategy)._asdict(),
               describe_strategy(strategy, cfg.method.strategy),
               ", ".join(filter(None, (layout.describe(), choice.describe()))),
               None if choice.how == "single" else choice.record(), samples, plan, train_step)


def choose_packing(cfg: TrainConfig, train_step, state, data, layout: parallel.Layout) -> packing.Choice:
    """How the run's packed replicas are computed: "auto" decides here, before anything is
    written or compiled (it measures the candidates on the run's first batch where it
    measures: `core/packing.py`), so the records and the printed layout say what runs."""
    if layout.per_device == 1:
        return packing.Choice(resolve_packing(cfg.placement.packing, layout.mesh, 1), "single")
    if cfg.placement.packing != "auto":
        return packing.Choice(cfg.placement.packing, "forced")
    batch = parallel.global_batch(data.loader.batch(0), layout.mesh)
    if data.device_transform is not None:   # the step sees the transformed batch
        batch = jax.jit(data.device_transform)(batch, state.step)
    try:
        choice = train_step.decide(state, batch)
    except ValueError as err:   # $JAXSEL_PACKING_MEASURE set to neither 1 nor 0
        raise ConfigError(str(err)) from None
    if choice.how == "measured" and jax.process_index() == 0:   # where it was not kept, `store` said so
        kept = f"; kept in {choice.kept.parent}" if choice.kept is not None else ""
        print(f"jaxsel: {choice.describe()}{kept}", file=sys.stderr, flush=True)
    return choice


#: why every process of a multi-host run must hold as many devices as the others
ONE_SHAPE = ("a multi-host run places the same number of replicas on every process, so every process needs as "
             "many devices (JAX_NUM_CPU_DEVICES, CUDA_VISIBLE_DEVICES): start them alike")


def make_layout(cfg: TrainConfig) -> parallel.Layout:
    """The run's replicas on its devices; replicas that do not fit are a ConfigError.
    A multi-host run uses every device of every process (replicas: a multiple of them)."""
    n = jax.device_count()
    if distributed.is_multiprocess():   # before any mesh: unequal processes failed a C++ check in one of them
        distributed.agree_settings({"local devices": jax.local_device_count()}, ONE_SHAPE)
    if distributed.is_multiprocess() and (cfg.placement.replicas % n or cfg.placement.devices not in (None, n)):
        raise ConfigError(f"a multi-host run uses every device: replicas must be a multiple of {n} "
                          f"({jax.process_count()} processes x {jax.local_device_count()} devices), "
                          f"got {cfg.placement.replicas}")
    try:
        where = cfg.placement
        return parallel.choose_layout(where.replicas, devices=where.devices, platform=where.platform)
    except parallel.LayoutError as err:
        raise ConfigError(str(err)) from None


def named_now(cfg: TrainConfig) -> TrainConfig:
    """`cfg` with each strategy option given by its last release's name (the strategy's
    `aliases`: DiLoCo's `inner_steps` is `period`) under its new one, warned once
    (`compat.renamed_options`), so the run and its records use today's names; a record
    that holds an old name is read by old_records.py."""
    method = cfg.method
    cls = STRATEGIES.get(method.strategy) if isinstance(method.strategy, str) else None
    if cls is None or not set(method.strategy_options or {}) & set(cls.aliases):
        return cfg
    try:
        options = read_renamed(cls, method.strategy_options, kind="strategy", name=method.strategy, stacklevel=3)
    except ValueError as err:   # both names given
        raise ConfigError(str(err)) from None
    return dataclasses.replace(cfg, strategy_options=options)


def strategy_inputs(cfg: TrainConfig, steps_per_epoch: int = 1) -> tuple:
    """All a run's strategy is built from: its name, its options, the run facts
    `build_strategy` fills in, its faulty replicas (plan.py keys a job's builds by them)."""
    opt, where = cfg.optim, cfg.placement
    facts = dict(replicas=where.replicas, total_steps=opt.steps, steps_per_epoch=steps_per_epoch, seed=opt.seed,
                 lr=opt.lr, weight_decay=opt.weight_decay)
    return cfg.method.strategy, cfg.method.strategy_options, facts, where.faulty_replicas


def configured_strategy(cfg: TrainConfig, steps_per_epoch: int = 1):
    """The strategy `cfg` asks for, built; a bad option is a ConfigError (one line, exit 2)."""
    name, options, context, faulty = strategy_inputs(cfg, steps_per_epoch)
    try:
        strategy = build_strategy(name, options, **context)
    except ValueError as err:   # OptionError included: a misspelt or inapplicable option, a bad value
        raise ConfigError(str(err)) from None
    return with_faulty_replicas(strategy, faulty)


def with_faulty_replicas(strategy, count: int):
    """`strategy` whose aggregator first replaces the last `count` replicas' payloads by
    garbage (`aggregate.WithFaultyReplicas`); only a strategy that aggregates can."""
    if not count:
        return strategy
    if not isinstance(strategy.aggregator, Aggregator):
        raise ConfigError(f"faulty_replicas needs a strategy with an aggregator option (bsp, localsgd, fedavg, "
                          f"selsync, superstep, accordion, diloco, ...), got {strategy.name!r}")
    try:
        return dataclasses.replace(strategy, aggregator=WithFaultyReplicas(strategy.aggregator, count))
    except ValueError as err:   # a codec: its compressed sum would bypass the garbage
        raise ConfigError(f"faulty_replicas: {err}") from None


def make_strategy(cfg: TrainConfig, steps_per_epoch: int):
    """The run's strategy (built once per run, by its plan)."""
    return configured_strategy(cfg, steps_per_epoch)


def start_warnings(cfg: TrainConfig, strategy, samples: RunSamples | None = None) -> tuple[str, ...]:
    """The run's one-line warnings: a strategy that would never sync (or whose run is all
    warm-up), a learning rate that would never decay. The plan keeps them and `created_dirs`
    prints them once every check has passed, so a refused run says only why it is refused."""
    lines = (never_syncs_warning(strategy, cfg.optim.steps) or all_warmup_warning(strategy, cfg.optim.steps),
             never_fires_warning(cfg.optim.lr_schedule, cfg.lr_schedule_length, cfg.optim.steps, samples))
    return tuple(line for line in lines if line)


def describe_strategy(strategy, name: str) -> str:
    return strategy.describe()


def evaluation_weights(state, strategy) -> tuple[Any, Any]:
    """(params, model_state) the strategy evaluates: its eval params averaged over replicas."""
    return consensus(state, strategy), consensus_model_state(state)


def check_paths(cfg: TrainConfig, *, job_cell: bool = False) -> None:
    """The filesystem side, checked before any data is read: a run directory that holds
    symbolic links (rundir/links.py), another run (when not resuming: nothing is overwritten), a comparison or lies inside a
    long job's directory (ever, unless `job_cell`: the job trains its own cell; run_kinds.py),
    a checkpoint dir that already holds another run's checkpoints (when not resuming) or,
    named for a resume, belongs to another run directory (rundir/owner.py), an explicit
    data_dir that does not exist (an error for a dataset that must be prepared there;
    embedded datasets are built into it, so it is created and said), a real dataset not
    prepared; TensorBoard without a run directory to write to."""
    if cfg.evaluation.tensorboard and not cfg.evaluation.out_dir:
        raise ConfigError("tensorboard needs out_dir: the event files are written to the run directory")
    if cfg.evaluation.out_dir:
        refuse_links(cfg.evaluation.out_dir)   # its files are its own: nothing is written through a link (cp -rs)
        refuse_comparison(cfg.evaluation.out_dir)   # resumed or not: a comparison is no run to continue
        if not job_cell:
            refuse_job_cell(cfg.evaluation.out_dir)   # its records are a job's: only the job writes them
    if cfg.evaluation.out_dir and not cfg.checkpoints.resume:
        held = held_records(cfg.evaluation.out_dir)
        if held:
            raise ConfigError(f"run directory {str(cfg.evaluation.out_dir)!r} already holds a run ({', '.join(held)}); "
                              f"continue it with --resume, or choose another --out (nothing is overwritten)")
    root = cfg.checkpoint_root()
    if root is not None:
        refuse_not_jaxsels(root)
    owner = foreign_owner(root, cfg.evaluation.out_dir) if root is not None else None
    if root is not None and not cfg.checkpoints.resume:
        steps = existing_steps(root)
        if steps:
            advice = (f", of {owner}); give this run a --checkpoint-dir of its own, or choose another --out"
                      if owner is not None else
                      "); continue that run with --resume, or choose another --checkpoint-dir")
            raise ConfigError(f"checkpoint dir {str(root)!r} already holds checkpoints (newest: step "
                              f"{max(steps)}{advice}")
    if owner is not None and cfg.checkpoints.resume:   # named with --checkpoint-dir (another run's recorded folder forks)
        forks = records(cfg.evaluation.out_dir, root)   # only a run directory that records the folder forks it
        raise ConfigError(f"checkpoint dir {str(root)!r} belongs to {owner}, not to {str(cfg.evaluation.out_dir)!r}; " + (
            "resume without --checkpoint-dir to fork its checkpoints into a folder of this run's own" if forks else
            "give this run a --checkpoint-dir of its own (or none)") + ", or resume that run directory itself")
    if cfg.evaluation.out_dir and cfg.checkpoints.resume:
        refuse_restart(cfg)
    if cfg.data.data_dir is not None and not Path(cfg.data.data_dir).is_dir():
        spec = KNOWN.get(cfg.data.dataset)
        if spec is None or spec.builder is None:
            hint = spec.prepare_hint(str(cfg.data.data_dir)) if spec is not None else ""
            raise ConfigError(
                f"data_dir {str(cfg.data.data_dir)!r} does not exist or is not a directory, so dataset "
                f"{cfg.data.dataset!r} is not prepared there; pass the --data-dir that holds it"
                + (f", or prepare it: {hint}" if hint else ""))
        writable_dir(cfg.data.data_dir, "--data-dir")   # the embedded dataset is built into it
    check_prepared(cfg.data.dataset, cfg.data.data_dir)   # a real dataset: prepared, before anything is created




def refuse_not_jaxsels(root: Path) -> None:
    """ConfigError when checkpoint folder `root` holds what jaxsel did not write and no owner
    file (rundir/owner.py `not_jaxsels`): nothing is written into it, not even the owner file."""
    strange = not_jaxsels(root)
    if strange:
        more = f" and {len(strange) - 1} more" if len(strange) > 1 else ""
        raise ConfigError(f"checkpoint dir {str(root)!r} is not a checkpoint folder of jaxsel's: it holds "
                          f"{strange[0]!r}{more}, which jaxsel did not write, and no {OWNER_FILE}; jaxsel writes "
                          f"nothing into it: name a new or empty folder with --checkpoint-dir")


def held_records(out_dir: str | os.PathLike) -> list[str]:
    """The `RUN_RECORDS` run directory `out_dir` holds (not empty)."""
    return [name for name in RUN_RECORDS if _nonempty(Path(out_dir) / name)]


def _nonempty(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 0


def refuse_restart(cfg: TrainConfig) -> None:
    """A resume finds the step to continue from in the checkpoints; where there are none (a
    run made with --no-checkpoint, stopped before its first save, or whose folder was
    deleted or moved) it starts from step 0 and writes its records afresh. In a run
    directory that holds a run's records, that would cut its rows and replace its final
    figures and settings (by another strategy's, even): ConfigError, before anything is
    touched. A copied run directory counts the checkpoints it forks from."""
    held = held_records(cfg.evaluation.out_dir)
    root = cfg.checkpoint_root()
    if not held or existing_steps(root):
        return
    source = _fork_source(cfg)
    if source is not None and existing_steps(source):
        return
    raise ConfigError(f"run directory {str(cfg.evaluation.out_dir)!r} holds a run ({', '.join(held)}) but there is no "
                      f"checkpoint to continue it from ({str(root)!r} holds none); a resume would start it over "
                      f"and replace its records, so nothing was touched: give --checkpoint-dir where its "
                      f"checkpoints are, choose another --out, or remove the run directory to start over there")


def resumed_settings(cfg: TrainConfig) -> TrainConfig:
    """What a resumed run takes from the run it continues: where its checkpoints are (the
    run directory's config.json records it; a run directory of an earlier jaxsel used
    checkpoints/<its name>), and the run length its fractional LR milestones refer to (its
    checkpoints record it), so `--resume --steps N` past the end never moves them."""
    if not cfg.checkpoints.resume:
        return cfg
    source = None
    if cfg.checkpoints.checkpoint_dir is None and cfg.evaluation.out_dir:
        recorded = _recorded_checkpoint_dir(Path(cfg.evaluation.out_dir))
        source = fork_source(cfg.checkpoints.resume, cfg.evaluation.out_dir, recorded)
        if source is not None:   # a copied run directory: checkpoints of its own (rundir/owner.py)
            cfg = dataclasses.replace(cfg, checkpoint_dir=str(fork_root(source, default_checkpoint_name(cfg))))
        elif recorded is not None:
            cfg = dataclasses.replace(cfg, checkpoint_dir=recorded)
    if cfg.optim.lr_schedule_steps is None:
        own = cfg.checkpoint_root()
        length = newest_meta(source if source is not None and not existing_steps(own) else own).get(
            "lr_schedule_steps")
        if length is not None:
            cfg = dataclasses.replace(cfg, lr_schedule_steps=int(length))
    return cfg


def claim_checkpoints(cfg: TrainConfig, run_id: str | None = None) -> None:
    """Under the run's lock, before it restores: claim its checkpoint folder for its run
    directory, and fill a copied run directory's own folder with the checkpoints of the
    folder its config.json records (rundir/owner.py)."""
    root = cfg.checkpoint_root()
    if root is None or not cfg.evaluation.out_dir:
        return
    clear_partial_forks(root)   # a fork killed mid-copy (SIGKILL) left its half copies
    source = _fork_source(cfg)
    forked = source is not None and root.absolute() == fork_root(source, default_checkpoint_name(cfg)).absolute()
    if forked:   # `resumed_settings` forked
        fork(source, root, cfg.evaluation.out_dir)
    claim(root, cfg.evaluation.out_dir, run_id)


def _fork_source(cfg: TrainConfig) -> Path | None:
    """The checkpoints a resumed copy of a run directory forks from (rundir/owner.py), as
    its config.json records them."""
    out_dir = cfg.evaluation.out_dir
    return fork_source(cfg.checkpoints.resume, out_dir, _recorded_checkpoint_dir(Path(out_dir)))


def _recorded_checkpoint_dir(out: Path) -> str | None:
    config = read_record(RunDir(out).config, dict)
    if not config.ok:
        return None   # no run here yet (or not one jaxsel can read): the default
    recorded = config.value.get("checkpoint_root")
    if recorded is not None and (not isinstance(recorded, str) or "\0" in recorded):
        raise ConfigError(f"{RunDir(out).config}: checkpoint_root is {json.dumps(recorded)[:80]} ("
                          f"{type(recorded).__name__}), not a folder's path (a string); write this run's checkpoint "
                          f"folder there, or null for the default")
    if recorded:
        return recorded
    legacy = Path(CHECKPOINTS_DIR) / out.name   # jaxsel before unique checkpoint folders
    return str(legacy) if existing_steps(legacy) else None


class Resources(NamedTuple):
    """What a run needs, estimated before anything is allocated or compiled."""

    state: int           # bytes of the whole replicated TrainState (all replicas)
    batches: int         # bytes of the batches in flight (prefetched + the current one)
    activations: int     # a lower bound: every layer's outputs, kept for the backward pass
    host: int            # this process's host memory: host batches + projection tables


def estimate_resources(cfg: TrainConfig, fm: FunctionalModel, optimizer, strategy, mesh,
                       input_shape) -> Resources:
    """Parameters x replicas x (1 + optimizer slots) + strategy state (e.g. SelSync's
    windows) from the abstract state; batch and activations from the shapes."""
    shapes = jax.eval_shape(lambda: init_state(fm.params, optimizer, strategy, mesh,
                                               model_state=fm.model_state, replicas=cfg.placement.replicas))
    state = sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in jax.tree.leaves(shapes))
    example = int(np.prod(input_shape)) * 4
    widths = sum(int(x.shape[-1]) for x in jax.tree.leaves(fm.params) if np.ndim(x) >= 2)
    examples = cfg.placement.replicas * cfg.optim.batch_size
    batches = examples * example * (cfg.data.prefetch + 1)
    activations = 2 * examples * (example + 4 * widths)
    host = examples * example * (cfg.data.prefetch + 1) + cfg.optim.steps * cfg.placement.replicas * 8
    return Resources(state, batches, activations, host)


def _device_limit(mesh) -> int | None:
    device = next(d for d in mesh.devices.flat if d.process_index == jax.process_index())
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    return int(stats["bytes_limit"]) if stats and stats.get("bytes_limit") else None


def _host_available() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_resources(cfg: TrainConfig, need: Resources, mesh) -> None:
    """ConfigError with the figures when the run cannot fit in memory or on disk."""
    devices = mesh.devices.size
    per_device = (need.state + need.batches + need.activations) / devices
    what = (f"state {byte_size(need.state)} over {devices} devices, batches {byte_size(need.batches)}, "
            f"activations >= {byte_size(need.activations)}")
    hint = "lower --batch-size, --replicas, --steps or the strategy's window"
    limit = _device_limit(mesh)
    if limit is not None and per_device > limit:
        k = max(1, cfg.placement.replicas // devices)
        raise ConfigError(f"the run needs about {byte_size(per_device)} per device for its {k} replica(s) "
                          f"per device ({what}) but a {mesh.devices.flat[0].device_kind} has "
                          f"{byte_size(limit)}; {hint}, or spread the replicas over more devices")
    local = len([d for d in mesh.devices.flat if d.process_index == jax.process_index()])
    host = need.host + (per_device * local if limit is None else 0)   # CPU devices live in host memory
    available = _host_available()
    if host > available:
        raise ConfigError(f"the run needs about {byte_size(host)} of host memory ({what}; projection "
                          f"tables {byte_size(cfg.optim.steps * cfg.placement.replicas * 8)}) but {byte_size(available)} "
                          f"is available; {hint}")
    root = cfg.checkpoint_root()
    if root is not None and jax.process_index() == 0:
        kept = cfg.checkpoints.keep + 1 - (len(existing_steps(root)) if cfg.checkpoints.resume else 0)
        disk = need.state * max(kept, 1)
        probe = next(p for p in [root.absolute(), *root.absolute().parents] if p.exists())
        free = shutil.disk_usage(probe).free
        if disk > free:
            raise ConfigError(f"checkpoints need about {byte_size(disk)} in {str(root)!r} ({cfg.checkpoints.keep} kept "
                              f"+ 1 being written, {byte_size(need.state)} each) but {byte_size(free)} "
                              f"is free; lower --keep, free space or choose another --checkpoint-dir")
