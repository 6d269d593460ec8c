"""TrainConfig: every setting of a training run, and every check of those settings.

Each field is declared once, with its flag (`declare.option`): the command line's parsers,
config files and the choice checks read the declarations. `check_config` runs once per run,
in its plan (plan.py), before any data is read or anything compiles, whoever starts the run,
and once per entry of a comparison before any cell trains. Each bad value becomes one
`ConfigError` naming the value and what is allowed; the CLI prints it as one line and exits
2. Strategy options are checked where the strategy is built (once per run, in its plan):
the strategy, its trigger and aggregator own those rules.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
from pathlib import Path

from ..core.checks import INT32_MAX, MAX_SEED, check_int, check_number
from ..core.choices import LOADERS, LOCAL_LOOPS, NONFINITE_POLICIES, current_loop   # without JAX: `--help` reads them
from .declare import Flag, declarations, declare_flags, flag_of, named, option
from .rundir import CHECKPOINTS_DIR

#: the step counter is an int32 on the device
MAX_STEPS = INT32_MAX
#: when each replica's own model is evaluated too (replica_eval.py)
EVAL_REPLICAS = ("final", "every", "off")
#: where `clip_norm` clips (training/grad_clip.py)
CLIP_AT = ("update", "gradients")


class ConfigError(ValueError):
    """A setting that cannot work: one line naming it and what is allowed (exit code 2)."""


#: `--augment`'s spellings of the field's values (None: the dataset's own default)
AUGMENT = {"auto": None, "on": True, "off": False}
#: the sections of the settings other than "optim", the default (declare.SECTIONS titles them)
STRATEGY, DATA, REPLICAS, EVAL, PROJECT, CHECKPOINTS = "strategy", "data", "replicas", "eval", "project", "checkpoints"


def _augment(text: str) -> bool | None:
    if text not in AUGMENT:
        raise ValueError(f"invalid choice: {text!r} (choose from {', '.join(map(repr, AUGMENT))})")
    return AUGMENT[text]


def _augment_text(value: bool | None) -> str:
    return next(k for k, v in AUGMENT.items() if v is value)


def _injection(text: str) -> tuple[float, float]:
    """`--inject ALPHA,BETA` (read by the data layer's own parser; checked by `check_config`)."""
    from ..data.injection import parse_injection

    try:
        return parse_injection(text)
    except ValueError:
        raise ValueError(f"expects ALPHA,BETA (two numbers), got {text!r}") from None


@declare_flags
@dataclasses.dataclass
class TrainConfig:
    """Every setting of a run, each declared once with its flag (`declare.option`)."""

    dataset: str = option("digits", group=DATA, help="dataset name (`jaxsel datasets` lists them)")
    model: str = option("mlp", help="model name (mlp, cnn, ...)")
    strategy: str = option("selsync", commands=("train",), group=STRATEGY, metavar="NAME[:KEY=VALUE...]",
                           help="the method and its options, e.g. selsync:delta=0.2 (`jaxsel strategies [NAME]`)")
    strategy_options: dict = option(factory=dict, no_flag="set in the --strategy entry or by --opt KEY=VALUE, "
                                    "checked against the strategy's own fields (cli/strategy_args.py)")
    replicas: int = option(8, group=REPLICAS, help="model replicas, packed k per device when there are fewer "
                                                   "devices (1..M or a multiple of M)")
    # where the replicas go (parallel.data_mesh): `platform`'s devices (None: the default
    # backend, an accelerator when there is one; never a silent CPU fall-back), the first
    # `devices` of them (None: all); replicas must be 1..M or a multiple of M devices
    platform: str | None = option(None, group=REPLICAS, help="put the replicas on this platform's devices, e.g. "
                                                            "cpu (default: the accelerator if any)")
    devices: int | None = option(None, group=REPLICAS, help="use the first N devices (default: all)")
    local_replicas: str = option("auto", choices=LOCAL_LOOPS, group=REPLICAS, parse=current_loop,   # core/step.py
                                 help="how a device computes its packed replicas; auto: the fastest, measured "
                                      "once per model and batch and cached (unroll on CPU)")
    batch_size: int = option(16, help="per-replica batch size")
    steps: int = option(600, help="training steps")
    optimizer: str = option("sgd", help="sgd, adam or adamw")
    lr: float = option(0.05, help="learning rate")
    lr_schedule: str = option("constant", metavar="SPEC",
                              help="constant; milestones[:M1,M2,...][@GAMMA]: lr x GAMMA (0.1) at each "
                                   "milestone (M < 1: fraction of the run, M >= 1: step; 'milestones' = 0.5,0.75); "
                                   "every:K[@GAMMA]: x GAMMA every K steps; sample-epochs:E1,E2,...[@GAMMA][/SAMPLES]: "
                                   "x GAMMA at each epoch E counted from samples as SelSync's authors do (a local "
                                   "step b, a synced step b*N; SAMPLES per epoch, default the training set's)")
    # a resumed run keeps the length its checkpoints record, so `--resume --steps` never moves them
    lr_schedule_steps: int | None = option(None, no_flag="the run length fractional milestones refer to "
                                           "(None: steps); a resumed run takes it from its checkpoints; a "
                                           "flag would make --lr-sched ambiguous (config files set it)")
    momentum: float = option(0.9, help="optimizer momentum (sgd)")
    weight_decay: float = option(0.0, help="weight decay")
    clip_norm: float | None = option(None, help="clip gradients to this global norm")
    clip_at: str = option("update", choices=CLIP_AT,
                          help="where --clip-norm clips: the update the optimizer applies, after the method's "
                               "syncs (update), or each replica's gradients as backprop returns them, so the "
                               "method's statistic, its syncs and the update see them clipped")
    partition: str = option("seldp", group=DATA, help="data partitioning (seldp, disjoint, label_skew, dirichlet)")
    partition_options: dict = option(
        factory=dict, flag="--partition-opt", pairs=True, metavar="KEY=VALUE", group=DATA,
        help="partitioner option, e.g. classes_per_replica=1 (label_skew; =floor: the SelSync authors' "
             "floor(C/N) classes each, the rest dropped) or alpha=0.5 (dirichlet)",
        keys=(("injection", Flag(("--inject",), "SelSync data injection: ceil(ALPHA*C) foreign classes, "
                                 "BETA*b*N/C samples each", metavar="ALPHA,BETA", parse=_injection)),))
    seed: int = option(0, help="seed of the model, data order and sampling")
    faulty_replicas: int = option(0, metavar="N", group=REPLICAS,
                                  help="the last N replicas send Gaussian garbage at every sync (a test of the "
                                       "robust aggregators)")
    eval_every: int = option(50, group=EVAL, help="steps between test evaluations")
    log_every: int = option(10, group=EVAL, help="steps between metric reads (one host round-trip)")
    divergence_every: int | None = option(None, metavar="N", group=EVAL, help="steps between reads of the "
                                          "replicas' divergence and correlation (default: --log-every)")
    data_dir: str | None = option(None, group=DATA, help="TFDS data dir (default ~/.cache/jaxsel/tfds)")
    out_dir: str | None = option(None, no_flag="the run directory; set by the job flag --out (cli/job_args.py), "
                                 "which compare and frontier read as their own folder", set_by="--out")
    # live dashboards (writers.py), written at the metric reads: TensorBoard event files in
    # out_dir, a W&B run in this project; run_group groups the runs of one comparison
    tensorboard: bool = option(False, group=EVAL, help="TensorBoard event files in the run directory "
                                                       '(pip install "jaxsel[tensorboard]")')
    wandb_project: str | None = option(None, flag="--wandb", metavar="PROJECT", group=EVAL,
                                       help="log to this W&B project; WANDB_MODE=offline writes it locally "
                                            '(pip install "jaxsel[wandb]")')
    run_group: str | None = option(None, metavar="NAME", group=EVAL,
                                   help="group the dashboards' runs under this name (compare: its directory's)")
    progress: bool = option(True, group=EVAL, help="show the progress bar")
    # data pipeline (jaxsel/data): dataset_options: seq_len, in_memory, records_per_window
    # (token/big sets), num_samples/seed (mnist1d); partition_options may hold
    # injection=(alpha, beta); augment None = the dataset's default crop+flip
    dataset_options: dict = option(factory=dict, flag="--dataset-opt", pairs=True, metavar="KEY=VALUE", group=DATA,
                                   help="dataset option: seq_len, in_memory, records_per_window, num_samples, seed")
    augment: bool | None = option(None, parse=_augment, show=_augment_text, metavar="{auto,on,off}", group=DATA,
                                  help="on-device random crop + flip (auto: the dataset's default)")
    prefetch: int = option(2, metavar="N", group=DATA, help="batches placed on the devices ahead of the step")
    loader: str = option("auto", choices=LOADERS, group=DATA,
                         help="how batches are built: Grain processes or threads (auto: Grain for image sets "
                              "decoded on the host, threads for in-memory sets)")
    loader_workers: int | None = option(None, metavar="N", group=DATA, help="Grain worker processes (default: all "
                                                                            "cores but one) or threads (default 2)")
    eval_examples: int | None = option(None, group=EVAL, help="evaluate on the first N test examples (default: "
                                                              "all)")
    eval_replicas: str = option("final", choices=EVAL_REPLICAS, group=EVAL,
                                help="also evaluate each replica's own model: at the end, at every evaluation, "
                                     "or not")
    # checkpoints and faults (checkpoint.py, faults.py): checkpointing is on when any of
    # checkpoint_dir / checkpoint_every / resume is set; the dir defaults to
    # checkpoints/<run> (`default_checkpoint_name`: unique per out_dir)
    checkpoint_dir: str | None = option(None, commands=("train",), group=CHECKPOINTS,
                                        help="checkpoint directory (default checkpoints/<name of the run "
                                             "directory>)")
    checkpoint_every: int | None = option(None, commands=("train",), group=CHECKPOINTS,
                                          help="steps between asynchronous checkpoints (also saved at the end "
                                               "and on SIGTERM/SIGINT)")
    keep: int = option(3, commands=("train",), group=CHECKPOINTS, help="newest checkpoints to keep")
    resume: bool = option(False, no_flag="continue the run from its newest readable checkpoint; set by the job "
                          "flag --resume (cli/job_args.py)", set_by="--resume")
    nonfinite: str = option("stop", choices=NONFINITE_POLICIES, commands=("train",), group=CHECKPOINTS,
                            help="NaN/inf loss or gradient: stop (keep the last good checkpoint) or skip the step")
    # projected wall-clock (jaxsel.costmodel): every logged step carries `projected_time_s`, what
    # the run would have taken so far on `project_network` with the same replicas, sync
    # pattern and `project_stragglers`, from this run's measured step time (or
    # `project_compute_s`, e.g. a GPU step time measured elsewhere). With
    # `project_gpus_per_host` > 1 the projected cluster has two levels: hosts of that many
    # replicas joined inside by `project_intra_network`, between by `project_network`
    project_network: str = option("10gbe", group=PROJECT, key_in=("--project", "network"), metavar="PRESET",
                                  old=("--project-network",),
                                  help="network between the projected hosts: nvlink, pcie, 100gbe, 25gbe, 10gbe, 1gbe")
    project_intra_network: str = option("nvlink", group=PROJECT, key_in=("--project", "intra_network"),
                                        metavar="PRESET", old=("--intra-network", "--project-intra-network"),
                                        help="network inside a host of more than one replica")
    project_gpus_per_host: int = option(1, group=PROJECT, key_in=("--project", "gpus_per_host"), metavar="K",
                                        old=("--gpus-per-host", "--project-gpus-per-host"),
                                        help="replicas per host, dividing --replicas (1: one network)")
    project_stragglers: str | None = option(None, group=PROJECT, key_in=("--project", "stragglers"), metavar="SPEC",
                                            old=("--project-stragglers",),
                                            help="straggler model, e.g. lognormal:sigma=0.2")
    project_compute_s: float | None = option(None, group=PROJECT, key_in=("--project", "compute_s"),
                                             metavar="SECONDS", old=("--project-compute-s",),
                                             help="step compute time (default: this run's, measured)")

    def __post_init__(self):
        # last release's loops (a config file, an old run's config.json, a library user's
        # TrainConfig) run as their replacement, warned (core/choices.py)
        self.local_replicas = current_loop(self.local_replicas, stacklevel=4)

    def checkpoint_root(self) -> Path | None:
        """Where checkpoints go, or None when checkpointing is off."""
        if not (self.checkpoint_dir or self.checkpoint_every or self.resume):
            return None
        if self.checkpoint_dir:
            return Path(self.checkpoint_dir)
        return Path(CHECKPOINTS_DIR) / default_checkpoint_name(self)

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


def _check_int(name: str, v, low: int, high: int = INT32_MAX, optional: bool = False) -> None:
    """Every integer setting is bounded: the ones that reach jit by int32, the rest alike (a
    count past 2**31 - 1 is a typo, never a run)."""
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
    _check_int("faulty_replicas", cfg.faulty_replicas, 0, cfg.replicas - 1)
    _check_number("lr", cfg.lr, positive=True)
    _check_lr_schedule(cfg)
    _check_int("lr_schedule_steps", cfg.lr_schedule_steps, 1, MAX_STEPS, optional=True)
    _check_number("momentum", cfg.momentum, positive=False)
    if not cfg.momentum < 1:
        raise ConfigError(f"momentum must be in [0, 1) (a momentum of 1 or more never forgets a gradient "
                          f"and diverges), got {cfg.momentum!r}")
    _check_number("weight_decay", cfg.weight_decay, positive=False)
    _check_number("clip_norm", cfg.clip_norm, positive=True, optional=True)
    if cfg.clip_at == "gradients" and cfg.clip_norm is None:
        raise ConfigError(f"{named(TrainConfig, 'clip_at')} gradients clips to {named(TrainConfig, 'clip_norm')}, "
                          f"which is unset: give the norm, or leave clip_at at its default")
    _check_number("project_compute_s", cfg.project_compute_s, positive=False, optional=True,
                  unit=" (seconds per step)")
    _check_int("project_gpus_per_host", cfg.project_gpus_per_host, 1)
    if cfg.replicas % cfg.project_gpus_per_host:
        raise ConfigError(f"{named(TrainConfig, 'project_gpus_per_host')} {cfg.project_gpus_per_host} must divide "
                          f"replicas {cfg.replicas}: "
                          f"the projected hosts each hold the same number of replicas")


#: optional writers: TrainConfig field -> (the module it needs, the pip command)
EXTRAS = {"tensorboard": ("tensorboardX", 'pip install "jaxsel[tensorboard]"'),
          "wandb_project": ("wandb", 'pip install "jaxsel[wandb]"')}


def missing_extra(cfg) -> str | None:
    """The one-line error for a writer asked for whose package is not installed."""
    for field, (module, pip) in EXTRAS.items():
        if getattr(cfg, field, None) and importlib.util.find_spec(module) is None:
            return f"{flag_of(TrainConfig, field)} needs {module}, which is not installed; {pip}"
    return None


def _check_writers(cfg: TrainConfig) -> None:
    if cfg.wandb_project is not None and (not isinstance(cfg.wandb_project, str) or not cfg.wandb_project.strip()):
        raise ConfigError(f"{named(TrainConfig, 'wandb_project')} must be a W&B project name, "
                          f"got {cfg.wandb_project!r}")
    missing = missing_extra(cfg)
    if missing:
        raise ConfigError(missing)


#: settings naming a path or a platform: empty is an error, never the default
TEXTS = ("out_dir", "checkpoint_dir", "data_dir", "platform")


def _check_texts(cfg: TrainConfig) -> None:
    for name in TEXTS:
        value = getattr(cfg, name)
        if value is not None and not (isinstance(value, (str, Path)) and str(value).strip()):
            what = "name" if name == "platform" else "path"
            raise ConfigError(f"{named(TrainConfig, name)} must be a non-empty {what}, got {value!r}; "
                              f"leave it out for the default")


def _check_lr_schedule(cfg: TrainConfig) -> None:
    """The spec parses; a sample-epochs clock's int32 count holds an epoch plus a synced step
    (replicas and batch_size are checked before)."""
    from .lr_schedule import read_lr_schedule

    try:
        spec = read_lr_schedule(cfg.lr_schedule)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if spec.kind == "sample-epochs" and (spec.epoch_samples or 0) + cfg.batch_size * cfg.replicas > INT32_MAX:
        raise ConfigError(f"{named(TrainConfig, 'lr_schedule')} {cfg.lr_schedule}: an epoch's samples plus a synced "
                          f"step's ({cfg.batch_size} x {cfg.replicas}) exceed the device's int32 count ({INT32_MAX})")


def _check_names(cfg: TrainConfig) -> None:
    from ..data.partition import PARTITIONERS
    from ..data.sources import KNOWN
    from ..models import MODEL_REGISTRY
    from ..strategies import STRATEGIES
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
    _check_choices(cfg)


def _check_choices(cfg: TrainConfig) -> None:
    """Every field declared with `choices` holds one of them."""
    for name, decl in declarations(TrainConfig).items():
        allowed = decl.allowed() if isinstance(decl, Flag) else None
        if allowed is not None and getattr(cfg, name) not in allowed:
            raise ConfigError(f"{name} must be one of {', '.join(allowed)}, got {getattr(cfg, name)!r}")


def _check_projection(cfg: TrainConfig) -> None:
    """The projected cluster's networks, and straggler models that fit this run's replicas."""
    from ..costmodel import get_network
    from ..core.stragglers import straggler_factors

    for name in ("project_network", "project_intra_network"):
        try:
            get_network(getattr(cfg, name))
        except ValueError as err:
            raise ConfigError(f"{named(TrainConfig, name)}: {err}") from None
    try:
        straggler_factors(cfg.project_stragglers, 1, cfg.replicas, cfg.seed)   # one step: every check
    except ValueError as err:
        raise ConfigError(f"{named(TrainConfig, 'project_stragglers')}: {err}") from None


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
