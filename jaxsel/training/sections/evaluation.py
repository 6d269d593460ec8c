"""The `[eval]` section: test evaluations, metric reads, the run directory and the live
dashboards written at the metric reads (writers.py): TensorBoard event files in the run
directory, a W&B run in a project; `run_group` groups the runs of one comparison."""
from __future__ import annotations

import dataclasses
import importlib.util

from ..declare import FREE, LOCATION, REPORTED, flag_of, named, option, section
from .checks import ConfigError, bounded_int, declared_choices, non_empty_text

#: when each replica's own model is evaluated too (replica_eval.py)
EVAL_REPLICAS = ("final", "every", "off")
#: optional writers: field -> (the module it needs, the pip command)
EXTRAS = {"tensorboard": ("tensorboardX", 'pip install "jaxsel[tensorboard]"'),
          "wandb_project": ("wandb", 'pip install "jaxsel[wandb]"')}


@section("eval")
@dataclasses.dataclass(frozen=True)
class EvalSettings:
    """How often the run looks at itself, and where it writes what it sees."""

    eval_every: int = option(50, effect=FREE, help="steps between test evaluations")
    log_every: int = option(10, effect=FREE, help="steps between metric reads (one host round-trip)")
    divergence_every: int | None = option(None, metavar="N", effect=FREE,
                                          help="steps between reads of the replicas' divergence and correlation "
                                               "(default: --log-every)")
    out_dir: str | None = option(None, no_flag="the run directory; set by the job flag --out (cli/job_args.py), "
                                 "which compare and frontier read as their own folder", set_by="--out",
                                 effect=LOCATION, per_process=True)
    tensorboard: bool = option(False, effect=FREE, per_process=True,
                               help='TensorBoard event files in the run directory (pip install "jaxsel[tensorboard]")')
    wandb_project: str | None = option(None, flag="--wandb", metavar="PROJECT", effect=FREE, per_process=True,
                                       help="log to this W&B project; WANDB_MODE=offline writes it locally "
                                            '(pip install "jaxsel[wandb]")')
    run_group: str | None = option(None, metavar="NAME", effect=FREE, per_process=True,
                                   help="group the dashboards' runs under this name (compare: its directory's)")
    progress: bool = option(True, effect=FREE, per_process=True, help="show the progress bar")
    eval_examples: int | None = option(None, effect=REPORTED,
                                       help="evaluate on the first N test examples (default: all)")
    eval_replicas: str = option("final", choices=EVAL_REPLICAS, effect=FREE,
                                help="also evaluate each replica's own model: at the end, at every evaluation, "
                                     "or not")

    def check(self, run) -> None:
        """Bounded intervals, a usable run directory and dashboards that can be written."""
        for name in ("eval_every", "log_every"):
            bounded_int(name, getattr(self, name), 1)
        for name in ("divergence_every", "eval_examples"):
            bounded_int(name, getattr(self, name), 1, optional=True)
        non_empty_text(self, "out_dir")
        declared_choices(self)
        if self.wandb_project is not None and (not isinstance(self.wandb_project, str)
                                               or not self.wandb_project.strip()):
            raise ConfigError(f"{named(EvalSettings, 'wandb_project')} must be a W&B project name, "
                              f"got {self.wandb_project!r}")
        missing = missing_extra(self)
        if missing:
            raise ConfigError(missing)


def missing_extra(settings) -> str | None:
    """The one-line error for a writer asked for whose package is not installed."""
    for field, (module, pip) in EXTRAS.items():
        if getattr(settings, field, None) and importlib.util.find_spec(module) is None:
            return f"{flag_of(EvalSettings, field)} needs {module}, which is not installed; {pip}"
    return None
