"""A run's settings in typed sections, one frozen dataclass per concern, each the
`[table]` of config files and the section of `--help` it is declared as, with its own
`check()`: every value is checked once, in its section, before any data is read or
anything compiles. `training.config.TrainConfig` composes them into one run's settings.

| section | class | holds |
|---|---|---|
| `[strategy]` | `StrategySettings` | the method and its options |
| `[data]` | `DataSettings` | the dataset, its partition over the replicas, the input pipeline |
| `[optim]` | `OptimSettings` | the model, the optimizer, its schedule, the batch, the length, the seed |
| `[replicas]` | `ReplicaSettings` | replicas, devices, how packed replicas are computed, faulty ones |
| `[eval]` | `EvalSettings` | evaluations, metric reads, the run directory, dashboards |
| `[checkpoints]` | `CheckpointSettings` | checkpoints and non-finite steps |
| `[project]` | `ProjectSettings` | the cluster the run's time is projected onto |

A section's `check(run)` takes the whole settings for the few rules that need another
section's value (a partition needs the replica count): it reads them through their section.

A new setting is one `option(...)` field in its section, with its check in the section's
`check()`: the field declares its flag (or why it has none), what it does to a run
(`effect`: whether a resume or a checkpoint of another value is refused) and whether each
process may set it (`per_process`). The command line, config files, checkpoints, resumes
and multi-host agreement read those; no other list names it.
"""
from .checkpoints import CheckpointSettings
from .checks import ConfigError
from .data import DataSettings
from .evaluation import EvalSettings
from .optim import OptimSettings
from .projection import ProjectSettings
from .replicas import ReplicaSettings
from .strategy import StrategySettings

#: the sections in their fields' order (the settings' own: SECTIONS of declare.py)
SECTION_TYPES = (StrategySettings, DataSettings, OptimSettings, ReplicaSettings, EvalSettings, ProjectSettings,
                 CheckpointSettings)
#: the order their checks run in: the replica count first, which other sections' rules read
CHECK_ORDER = (ReplicaSettings, StrategySettings, DataSettings, OptimSettings, EvalSettings, CheckpointSettings,
               ProjectSettings)

__all__ = ["CHECK_ORDER", "SECTION_TYPES", "CheckpointSettings", "ConfigError", "DataSettings", "EvalSettings",
           "OptimSettings", "ProjectSettings", "ReplicaSettings", "StrategySettings"]
