"""The `[data]` section: the dataset and its options, its shards over the replicas (the
partition, SelSync's data injection) and the input pipeline. `data.pipeline.build_input`
reads this section alone."""
from __future__ import annotations

import dataclasses

from ...core.choices import LOADERS
from ..declare import FREE, IDENTITY, Flag, option, section
from .checks import ConfigError, bounded_int, declared_choices, known_name, non_empty_text

#: `--augment`'s spellings of the field's values (None: the dataset's own default)
AUGMENT = {"auto": None, "on": True, "off": False}


def _augment(text: str) -> bool | None:
    if text not in AUGMENT:
        raise ValueError(f"invalid choice: {text!r} (choose from {', '.join(map(repr, AUGMENT))})")
    return AUGMENT[text]


def _augment_text(value: bool | None) -> str:
    return next(k for k, v in AUGMENT.items() if v is value)


def _injection(text: str) -> tuple[float, float]:
    """`--inject ALPHA,BETA` (read by the data layer's own parser; checked by `check`)."""
    from ...data.injection import parse_injection

    try:
        return parse_injection(text)
    except ValueError:
        raise ValueError(f"expects ALPHA,BETA (two numbers), got {text!r}") from None


@section("data")
@dataclasses.dataclass(frozen=True)
class DataSettings:
    """What the replicas train on and how it reaches them. dataset_options: seq_len,
    in_memory, records_per_window (token/big sets), num_samples/seed (mnist1d);
    partition_options may hold injection=(alpha, beta); augment None: the dataset's default
    crop+flip."""

    dataset: str = option("digits", effect=IDENTITY, help="dataset name (`jaxsel datasets` lists them)")
    partition: str = option("seldp", help="data partitioning (seldp, disjoint, label_skew, dirichlet)")
    partition_options: dict = option(
        factory=dict, flag="--partition-opt", pairs=True, metavar="KEY=VALUE",
        help="partitioner option, e.g. classes_per_replica=1 (label_skew; =floor: the SelSync authors' "
             "floor(C/N) classes each, the rest dropped) or alpha=0.5 (dirichlet)",
        keys=(("injection", Flag(("--inject",), "SelSync data injection: ceil(ALPHA*C) foreign classes, "
                                 "BETA*b*N/C samples each", metavar="ALPHA,BETA", parse=_injection)),))
    data_dir: str | None = option(None, effect=FREE, per_process=True,
                                  help="TFDS data dir (default ~/.cache/jaxsel/tfds)")
    dataset_options: dict = option(factory=dict, flag="--dataset-opt", pairs=True, metavar="KEY=VALUE",
                                   help="dataset option: seq_len, in_memory, records_per_window, num_samples, seed")
    augment: bool | None = option(None, parse=_augment, show=_augment_text, metavar="{auto,on,off}",
                                  help="on-device random crop + flip (auto: the dataset's default)")
    prefetch: int = option(2, metavar="N", effect=FREE, per_process=True,
                           help="batches placed on the devices ahead of the step")
    loader: str = option("auto", choices=LOADERS, effect=FREE, per_process=True,
                         help="how batches are built: Grain processes or threads (auto: Grain for image sets "
                              "decoded on the host, threads for in-memory sets)")
    loader_workers: int | None = option(None, metavar="N", effect=FREE, per_process=True,
                                        help="Grain worker processes (default: all cores but one) or threads "
                                             "(default 2)")

    def check(self, run) -> None:
        """Names, counts, the dataset's and the partitioner's options and data injection,
        before any data is read (`run`'s replicas: the shards the partition makes)."""
        from ...data.partition import PARTITIONERS
        from ...data.sources import KNOWN

        known_name("dataset", self.dataset, sorted(KNOWN))
        known_name("partition", self.partition, list(PARTITIONERS))
        bounded_int("prefetch", self.prefetch, 0)
        bounded_int("loader_workers", self.loader_workers, 1, optional=True)
        non_empty_text(self, "data_dir")
        declared_choices(self)
        self._check_options(run.placement.replicas, KNOWN[self.dataset])

    def _check_options(self, replicas: int, spec) -> None:
        from ...data.injection import check_injection
        from ...data.partition import check_partition_options
        from ...data.pipeline import check_dataset_options

        options = dict(self.partition_options or {})
        injection = options.pop("injection", None)
        try:
            check_dataset_options(spec, dict(self.dataset_options or {}))
            check_partition_options(self.partition, options, replicas, spec.num_classes)
            if injection is not None:
                check_injection(self.partition, injection)
        except ValueError as err:
            raise ConfigError(str(err)) from None
