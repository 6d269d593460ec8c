"""The `[optim]` section: the model, the optimizer, its learning rate and schedule, the
batch, the run's length and its seed."""
from __future__ import annotations

import dataclasses

from ...core.checks import INT32_MAX, MAX_SEED
from ..declare import FREE, IDENTITY, KEPT, named, option, section
from .checks import ConfigError, bounded_int, declared_choices, finite_number, known_name

#: the step counter is an int32 on the device
MAX_STEPS = INT32_MAX
#: where `clip_norm` clips (training/grad_clip.py)
CLIP_AT = ("update", "gradients")


@section("optim")
@dataclasses.dataclass(frozen=True)
class OptimSettings:
    """What each replica computes and how it steps. A resumed run keeps the length its
    checkpoints record (`lr_schedule_steps`), so `--resume --steps` never moves fractional
    LR milestones."""

    model: str = option("mlp", effect=IDENTITY, help="model name (mlp, cnn, ...)")
    batch_size: int = option(16, help="per-replica batch size")
    steps: int = option(600, effect=FREE, help="training steps")
    optimizer: str = option("sgd", help="sgd, adam or adamw")
    lr: float = option(0.05, help="learning rate")
    lr_schedule: str = option("constant", metavar="SPEC",
                              help="constant; milestones[:M1,M2,...][@GAMMA]: lr x GAMMA (0.1) at each "
                                   "milestone (M < 1: fraction of the run, M >= 1: step; 'milestones' = 0.5,0.75); "
                                   "every:K[@GAMMA]: x GAMMA every K steps; sample-epochs:E1,E2,...[@GAMMA][/SAMPLES]: "
                                   "x GAMMA at each epoch E counted from samples as SelSync's authors do (a local "
                                   "step b, a synced step b*N; SAMPLES per epoch, default the training set's)")
    lr_schedule_steps: int | None = option(None, effect=KEPT,
                                           no_flag="the run length fractional milestones refer to "
                                           "(None: steps); a resumed run takes it from its checkpoints; a "
                                           "flag would make --lr-sched ambiguous (config files set it)")
    momentum: float = option(0.9, help="optimizer momentum (sgd)")
    weight_decay: float = option(0.0, help="weight decay")
    clip_norm: float | None = option(None, help="clip gradients to this global norm")
    clip_at: str = option("update", choices=CLIP_AT,
                          help="where --clip-norm clips: the update the optimizer applies, after the method's "
                               "syncs (update), or each replica's gradients as backprop returns them, so the "
                               "method's statistic, its syncs and the update see them clipped")
    seed: int = option(0, help="seed of the model, data order and sampling")

    @property
    def lr_schedule_length(self) -> int:
        """The run length fractional LR milestones refer to."""
        return self.lr_schedule_steps or self.steps

    def check(self, run) -> None:
        """Names, bounded counts, finite rates (`run`'s replicas: what a sample-epochs clock counts)."""
        from ..optim import OPTIMIZERS
        from ...models import MODEL_REGISTRY

        known_name("model", self.model, sorted(MODEL_REGISTRY))
        known_name("optimizer", self.optimizer, list(OPTIMIZERS))
        bounded_int("batch_size", self.batch_size, 1)
        bounded_int("steps", self.steps, 1, MAX_STEPS)
        bounded_int("seed", self.seed, 0, MAX_SEED)
        finite_number("lr", self.lr, positive=True)
        self._check_lr_schedule(run.placement.replicas)
        bounded_int("lr_schedule_steps", self.lr_schedule_steps, 1, MAX_STEPS, optional=True)
        finite_number("momentum", self.momentum, positive=False)
        if not self.momentum < 1:
            raise ConfigError(f"momentum must be in [0, 1) (a momentum of 1 or more never forgets a gradient "
                              f"and diverges), got {self.momentum!r}")
        finite_number("weight_decay", self.weight_decay, positive=False)
        finite_number("clip_norm", self.clip_norm, positive=True, optional=True)
        declared_choices(self)
        if self.clip_at == "gradients" and self.clip_norm is None:
            raise ConfigError(f"{named(OptimSettings, 'clip_at')} gradients clips to "
                              f"{named(OptimSettings, 'clip_norm')}, which is unset: give the norm, or leave "
                              f"clip_at at its default")

    def _check_lr_schedule(self, replicas: int) -> None:
        """The spec parses; a sample-epochs clock's int32 count holds an epoch plus a synced
        step (replicas and batch_size are checked before)."""
        from ..lr_schedule import read_lr_schedule

        try:
            spec = read_lr_schedule(self.lr_schedule)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        if spec.kind == "sample-epochs" and (spec.epoch_samples or 0) + self.batch_size * replicas > INT32_MAX:
            raise ConfigError(f"{named(OptimSettings, 'lr_schedule')} {self.lr_schedule}: an epoch's samples plus "
                              f"a synced step's ({self.batch_size} x {replicas}) exceed the device's int32 count "
                              f"({INT32_MAX})")
