"""TrainConfig: every setting of a training run, and every check of those settings.

`check_config` runs once, before any data is read or anything compiles (the CLI calls it
first; `build_run` calls it for library users). Each bad value becomes one `ConfigError`
naming the value and what is allowed; the CLI prints it as one line and exits 2.
Strategy options are checked where the strategy is built (once per run, `run.build_run`):
the strategy, its trigger and aggregator own those rules.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
from pathlib import Path


from ..core.checks import check_int, check_number
from ..core.options import parse_kv

#: the step counter is an int32 on the device
MAX_STEPS = 2**31 - 1
#: when each replica's own model is evaluated too (replica_eval.py)
EVAL_REPLICAS = ("final", "every", "off")
#: JAX's PRNG keys hold 32 bits of a seed: larger seeds would alias smaller ones
MAX_SEED = 2**32 - 1


class ConfigError(ValueError):
    """A setting that cannot work: one line naming it and what is allowed (exit code 2)."""


@dataclasses.dataclass
class TrainConfig:
    dataset: str = "digits"
    model: str = "mlp"
    strategy: str = "selsync"
    strategy_options: dict = dataclasses.field(default_factory=dict)
    replicas: int = 8
    # where the replicas go (parallel.data_mesh): `platform`'s devices (None: the default
    # backend, an accelerator when there is one; never a silent CPU fall-back), the first
    # `devices` of them (None: all); replicas must be 1..M or a multiple of M devices
    platform: str | None = None
    devices: int | None = None
    local_replicas: str = "auto"    # a device's packed replicas' gradients: auto, vmap, unroll, map (core/step.py)
    batch_size: int = 16            # per replica
    steps: int = 600
    optimizer: str = "sgd"
    lr: float = 0.05
    lr_schedule: str = "constant"   # or "milestones[:M1,M2][@GAMMA]" (lr_schedule.py)
    # the run length fractional milestones refer to (None: `steps`); a resumed run keeps the
    # length its checkpoints record, so `--resume --steps` past the end never moves them
    lr_schedule_steps: int | None = None
    momentum: float = 0.9
    weight_decay: float = 0.0
    clip_norm: float | None = None
    partition: str = "seldp"
    partition_options: dict = dataclasses.field(default_factory=dict)
    seed: int = 0
    eval_every: int = 50
    log_every: int = 10
    divergence_every: int | None = None  # default: log_every (an extra model-sized reduction)
    data_dir: str | None = None
    out_dir: str | None = None      # metrics.jsonl and config.json go here when set
    # live dashboards (writers.py), written at the metric reads: TensorBoard event files in
    # out_dir, a W&B run in this project; run_group groups the runs of one comparison
    tensorboard: bool = False
    wandb_project: str | None = None
    run_group: str | None = None
    progress: bool = True
    # data pipeline (jaxsel/data): dataset_options: seq_len, in_memory, records_per_window
    # (token/big sets), num_samples/seed (mnist1d); partition_options may hold
    # injection=(alpha, beta); augment None = the dataset's default crop+flip
    dataset_options: dict = dataclasses.field(default_factory=dict)
    augment: bool | None = None
    prefetch: int = 2               # batches placed on the devices ahead of the step
    # how batches are built (data/loader.py): "grain" worker processes, "threads", or "auto":
    # grain for image sets decoded on the host (imagenet2012, cars196, image folders),
    # threads for in-memory and token sets; loader_workers None: grain all cores but one, 2 threads
    loader: str = "auto"
    loader_workers: int | None = None
    eval_examples: int | None = None  # evaluate on the first N test examples (None: all)
    eval_replicas: str = "final"    # each replica's own model too: "final" (at the end), "every" eval, "off"
    # checkpoints and faults (checkpoint.py, faults.py): checkpointing is on when any of
    # checkpoint_dir / checkpoint_every / resume is set; the dir defaults to
    # checkpoints/<run> (`default_checkpoint_name`: unique per out_dir)
    checkpoint_dir: str | None = None
    checkpoint_every: int | None = None  # steps between asynchronous saves (None: only at the end / on a signal)
    keep: int = 3                   # newest checkpoints kept
    resume: bool = False            # continue from the newest readable checkpoint
    nonfinite: str = "stop"         # NaN/inf loss or gradient: "stop" the run, or "skip" the step on device
    # projected wall-clock (jaxsel.costmodel): every logged step carries `projected_time_s`, what
    # the run would have taken so far on `project_network` with the same replicas, sync
    # pattern and `project_stragglers`, from this run's measured step time (or
    # `project_compute_s`, e.g. a GPU step time measured elsewhere). With
    # `project_gpus_per_host` > 1 the projected cluster has two levels: hosts of that many
    # replicas joined inside by `project_intra_network`, between by `project_network`
    project_network: str = "10gbe"
    project_intra_network: str = "nvlink"
    project_gpus_per_host: int = 1
    project_stragglers: str | None = None
    project_compute_s: float | None = None

    def checkpoint_root(self) -> Path | None:
        """Where checkpoints go, or None when checkpointing is off."""
        if not (self.checkpoint_dir or self.checkpoint_every or self.resume):
            return None
        if self.checkpoint_dir:
            return Path(self.checkpoint_dir)
        return Path("checkpoints") / default_checkpoint_name(self)

    @property
    def lr_schedule_length(self) -> int:
        """The run length fractional LR milestones refer to."""
        return self.lr_schedule_steps or self.steps

    def validate(self) -> None:
        """Raise ConfigError naming the first bad value (see `check_config`)."""
        check_config(self)


def default_checkpoint_name(cfg: TrainConfig) -> str:
    """checkpoints/<this> of a run without --checkpoint-dir: the run directory's name and 8
    hex digits of its resolved path (`--out a/x` and `--out b/x` never share a folder; the
    same directory spelt differently, `x` or `./x`, keeps its own); without a run
    directory, the run's strategy, dataset, model and seed."""
    if not cfg.out_dir:
        return f"{cfg.strategy}-{cfg.dataset}-{cfg.model}-seed{cfg.seed}"
    out = Path(cfg.out_dir).expanduser().resolve()
    return f"{out.name}-{hashlib.sha256(str(out).encode()).hexdigest()[:8]}"


#: settings each process of a multi-host run may set its own way (paths, host threads)
PROCESS_LOCAL = frozenset({"data_dir", "out_dir", "checkpoint_dir", "progress", "prefetch", "loader",
                           "loader_workers", "tensorboard", "wandb_project", "run_group"})


def agreed_settings(cfg: TrainConfig) -> dict:
    """The settings every process of a multi-host run must share."""
    return {k: v for k, v in dataclasses.asdict(cfg).items() if k not in PROCESS_LOCAL}


def _names(d) -> str:
    return ", ".join(sorted(d))


def _check_int(name: str, v, low: int, high: int | None = None, optional: bool = False) -> None:
    check_int(name, v, low, high, optional=optional, error=ConfigError)


def _check_number(name: str, v, *, positive: bool, optional: bool = False, unit: str = "") -> None:
    """Finite, and > 0 (`positive`) or >= 0."""
    check_number(name, v, positive=positive, optional=optional, unit=unit, error=ConfigError)


def check_config(cfg: TrainConfig) -> None:
    """Raise ConfigError naming the first bad value and what is allowed."""
    _check_numbers(cfg)
    _check_texts(cfg)
    _check_names(cfg)
    _check_writers(cfg)
    _check_data(cfg)
    _check_projection(cfg)


def _check_numbers(cfg: TrainConfig) -> None:
    for name in ("replicas", "batch_size", "eval_every", "log_every", "keep"):
        _check_int(name, getattr(cfg, name), 1)
    _check_int("steps", cfg.steps, 1, MAX_STEPS)
    for name in ("divergence_every", "checkpoint_every", "eval_examples", "devices"):
        _check_int(name, getattr(cfg, name), 1, optional=True)
    _check_int("prefetch", cfg.prefetch, 0)
    _check_int("loader_workers", cfg.loader_workers, 1, optional=True)
    _check_int("seed", cfg.seed, 0, MAX_SEED)
    _check_number("lr", cfg.lr, positive=True)
    _check_lr_schedule(cfg.lr_schedule)
    _check_int("lr_schedule_steps", cfg.lr_schedule_steps, 1, MAX_STEPS, optional=True)
    _check_number("momentum", cfg.momentum, positive=False)
    if not cfg.momentum < 1:
        raise ConfigError(f"momentum must be in [0, 1) (a momentum of 1 or more never forgets a gradient "
                          f"and diverges), got {cfg.momentum!r}")
    _check_number("weight_decay", cfg.weight_decay, positive=False)
    _check_number("clip_norm", cfg.clip_norm, positive=True, optional=True)
    _check_number("project_compute_s", cfg.project_compute_s, positive=False, optional=True,
                  unit=" (seconds per step)")
    _check_int("project_gpus_per_host", cfg.project_gpus_per_host, 1)
    if cfg.replicas % cfg.project_gpus_per_host:
        raise ConfigError(f"project_gpus_per_host (--gpus-per-host) {cfg.project_gpus_per_host} must divide "
                          f"replicas {cfg.replicas}: "
                          f"the projected hosts each hold the same number of replicas")


#: optional writers: TrainConfig field -> (its flag, the module it needs, the pip command)
EXTRAS = {"tensorboard": ("--tensorboard", "tensorboardX", 'pip install "jaxsel[tensorboard]"'),
          "wandb_project": ("--wandb", "wandb", 'pip install "jaxsel[wandb]"')}


def missing_extra(cfg) -> str | None:
    """The one-line error for a writer asked for whose package is not installed."""
    for field, (flag, module, pip) in EXTRAS.items():
        if getattr(cfg, field, None) and importlib.util.find_spec(module) is None:
            return f"{flag} needs {module}, which is not installed; {pip}"
    return None


def _check_writers(cfg: TrainConfig) -> None:
    if cfg.wandb_project is not None and (not isinstance(cfg.wandb_project, str) or not cfg.wandb_project.strip()):
        raise ConfigError(f"wandb_project (--wandb) must be a W&B project name, got {cfg.wandb_project!r}")
    missing = missing_extra(cfg)
    if missing:
        raise ConfigError(missing)


#: settings naming a path or a platform, and their flags: empty is an error, never the default
TEXTS = {"out_dir": "--out", "checkpoint_dir": "--checkpoint-dir", "data_dir": "--data-dir",
         "platform": "--platform"}


def _check_texts(cfg: TrainConfig) -> None:
    for name, flag in TEXTS.items():
        value = getattr(cfg, name)
        if value is not None and not (isinstance(value, (str, Path)) and str(value).strip()):
            raise ConfigError(f"{name} ({flag}) must be a non-empty {'name' if name == 'platform' else 'path'}, "
                              f"got {value!r}; leave it out for the default")


def _check_lr_schedule(spec) -> None:
    from .lr_schedule import parse_lr_schedule

    try:
        parse_lr_schedule(spec)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def _check_names(cfg: TrainConfig) -> None:
    from ..data.partition import PARTITIONERS
    from ..data.pipeline import LOADERS
    from ..data.sources import KNOWN
    from ..models import MODEL_REGISTRY
    from ..strategies import STRATEGIES
    from .faults import NONFINITE_POLICIES
    from .optim import OPTIMIZERS

    if cfg.dataset not in KNOWN:
        raise ConfigError(f"unknown dataset {cfg.dataset!r}; choose one of {_names(KNOWN)}")
    if cfg.model not in MODEL_REGISTRY:
        raise ConfigError(f"unknown model {cfg.model!r}; choose one of {_names(MODEL_REGISTRY)}")
    if cfg.optimizer not in OPTIMIZERS:
        raise ConfigError(f"unknown optimizer {cfg.optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
    if cfg.partition not in PARTITIONERS:
        raise ConfigError(f"unknown partition {cfg.partition!r}; choose one of {', '.join(PARTITIONERS)}")
    if cfg.strategy not in STRATEGIES:
        raise ConfigError(f"unknown strategy {cfg.strategy!r}; choose one of {', '.join(STRATEGIES)}")
    if cfg.local_replicas not in ("auto", "vmap", "unroll", "map"):
        raise ConfigError(f"local_replicas must be one of auto, vmap, unroll, map, got {cfg.local_replicas!r}")
    if cfg.eval_replicas not in EVAL_REPLICAS:
        raise ConfigError(f"eval_replicas must be one of {', '.join(EVAL_REPLICAS)}, got {cfg.eval_replicas!r}")
    if cfg.loader not in LOADERS:
        raise ConfigError(f"loader must be one of {', '.join(LOADERS)}, got {cfg.loader!r}")
    if cfg.nonfinite not in NONFINITE_POLICIES:
        raise ConfigError(f"nonfinite must be one of {', '.join(NONFINITE_POLICIES)}, got {cfg.nonfinite!r}")


def _check_projection(cfg: TrainConfig) -> None:
    """The projected cluster's networks, and straggler models that fit this run's replicas."""
    from ..costmodel import get_network
    from ..core.stragglers import straggler_factors

    for name, flag in (("project_network", "--project-network"), ("project_intra_network", "--intra-network")):
        try:
            get_network(getattr(cfg, name))
        except ValueError as err:
            raise ConfigError(f"{name} ({flag}): {err}") from None
    try:
        straggler_factors(cfg.project_stragglers, 1, cfg.replicas, cfg.seed)   # one step: every check
    except ValueError as err:
        raise ConfigError(f"project_stragglers (--project-stragglers): {err}") from None


def _check_data(cfg: TrainConfig) -> None:
    """Dataset options, the partitioner's options and data injection, before any data is read."""
    from ..data.injection import check_injection
    from ..data.partition import check_partition_options
    from ..data.pipeline import check_dataset_options
    from ..data.sources import KNOWN

    spec = KNOWN[cfg.dataset]
    options = dict(cfg.partition_options or {})
    injection = options.pop("injection", None)
    try:
        check_dataset_options(spec, dict(cfg.dataset_options or {}))
        check_partition_options(cfg.partition, options, cfg.replicas, spec.num_classes)
        if injection is not None:
            check_injection(cfg.partition, injection)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def parse_options(pairs: list[str] | None, flag: str = "--opt") -> dict:
    """KEY=VALUE strings -> dict, with ints, floats and true/false parsed (`options.parse_kv`)."""
    return parse_kv(pairs, flag)
