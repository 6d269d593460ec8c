"""The `[replicas]` section: how many replicas, on which devices, how a device computes
the replicas packed on it, and the faulty ones of a robustness test."""
from __future__ import annotations

import dataclasses

from ...compat.packing_names import OLD_PACKING_FLAGS, reads_old_name
from ...core.choices import PACKING_LOOPS, current_packing   # without JAX: `--help` reads them
from ..declare import FREE, IDENTITY, REPORTED, option, section
from .checks import bounded_int, declared_choices, non_empty_text


@reads_old_name   # last release's `local_replicas=`, noted (compat/packing_names.py)
@section("replicas")
@dataclasses.dataclass(frozen=True)
class ReplicaSettings:
    """Where the replicas go (parallel.data_mesh): `platform`'s devices (None: the default
    backend, an accelerator when there is one; never a silent CPU fall-back), the first
    `devices` of them (None: all); replicas must be 1..M or a multiple of M devices."""

    replicas: int = option(8, effect=IDENTITY, help="model replicas, packed k per device when there are fewer "
                                                    "devices (1..M or a multiple of M)")
    platform: str | None = option(None, effect=FREE, help="put the replicas on this platform's devices, e.g. "
                                                          "cpu (default: the accelerator if any)")
    devices: int | None = option(None, effect=FREE, help="use the first N devices (default: all)")
    packing: str = option("auto", choices=PACKING_LOOPS, parse=current_packing, effect=REPORTED,  # core/step.py
                          old=OLD_PACKING_FLAGS, help="how a device loops over its packed replicas; auto: the "
                                                      "fastest, measured once per model and batch and cached "
                                                      "(unroll on CPU)")
    faulty_replicas: int = option(0, metavar="N", help="the last N replicas send Gaussian garbage at every sync "
                                                       "(a test of the robust aggregators)")

    def __post_init__(self):
        # last release's loops (a config file, an old run's config.json, a library user's
        # settings) run as their replacement, warned (core/choices.py)
        object.__setattr__(self, "packing", current_packing(self.packing, stacklevel=4))

    def check(self, run) -> None:
        """Counts of at least one replica and device; fewer faulty replicas than replicas."""
        bounded_int("replicas", self.replicas, 1)
        bounded_int("devices", self.devices, 1, optional=True)
        bounded_int("faulty_replicas", self.faulty_replicas, 0, self.replicas - 1)
        non_empty_text(self, "platform", what="name")
        declared_choices(self)
