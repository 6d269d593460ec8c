"""The `[project]` section: the projected wall-clock (jaxsel.costmodel). Every logged step
carries `projected_time_s`, what the run would have taken so far on `project_network` with
the same replicas, sync pattern and `project_stragglers`, from this run's measured step
time (or `project_compute_s`, e.g. a GPU step time measured elsewhere). With
`project_gpus_per_host` > 1 the projected cluster has two levels: hosts of that many
replicas joined inside by `project_intra_network`, between by `project_network`."""
from __future__ import annotations

import dataclasses

from ..declare import FREE, named, option, section
from .checks import ConfigError, bounded_int, finite_number


@section("project")
@dataclasses.dataclass(frozen=True)
class ProjectSettings:
    """The cluster a run's time is projected onto; none of it changes the run."""

    project_network: str = option("10gbe", key_in=("--project", "network"), metavar="PRESET", effect=FREE,
                                  old=("--project-network",),
                                  help="network between the projected hosts: nvlink, pcie, 100gbe, 25gbe, 10gbe, 1gbe")
    project_intra_network: str = option("nvlink", key_in=("--project", "intra_network"), effect=FREE,
                                        metavar="PRESET", old=("--intra-network", "--project-intra-network"),
                                        help="network inside a host of more than one replica")
    project_gpus_per_host: int = option(1, key_in=("--project", "gpus_per_host"), metavar="K", effect=FREE,
                                        old=("--gpus-per-host", "--project-gpus-per-host"),
                                        help="replicas per host, dividing --replicas (1: one network)")
    project_stragglers: str | None = option(None, key_in=("--project", "stragglers"), metavar="SPEC", effect=FREE,
                                            old=("--project-stragglers",),
                                            help="straggler model, e.g. lognormal:sigma=0.2")
    project_compute_s: float | None = option(None, key_in=("--project", "compute_s"), effect=FREE,
                                             metavar="SECONDS", old=("--project-compute-s",),
                                             help="step compute time (default: this run's, measured)")

    def check(self, run) -> None:
        """Known networks, hosts that divide the run's replicas, straggler models that fit them."""
        from ...core.stragglers import straggler_factors
        from ...costmodel import get_network

        finite_number("project_compute_s", self.project_compute_s, positive=False, optional=True,
                      unit=" (seconds per step)")
        bounded_int("project_gpus_per_host", self.project_gpus_per_host, 1)
        replicas = run.placement.replicas
        if replicas % self.project_gpus_per_host:
            raise ConfigError(f"{named(ProjectSettings, 'project_gpus_per_host')} {self.project_gpus_per_host} must "
                              f"divide replicas {replicas}: the projected hosts each hold the same number of "
                              f"replicas")
        for name in ("project_network", "project_intra_network"):
            try:
                get_network(getattr(self, name))
            except ValueError as err:
                raise ConfigError(f"{named(ProjectSettings, name)}: {err}") from None
        try:
            straggler_factors(self.project_stragglers, 1, replicas, run.optim.seed)   # one step: every check
        except ValueError as err:
            raise ConfigError(f"{named(ProjectSettings, 'project_stragglers')}: {err}") from None
