"""Up-front checks of a TrainConfig, before any data is read or anything compiles.

Each bad value becomes one ValueError naming the value and what is allowed (the CLI prints
it as one line and exits 2). Strategy options are checked by building the strategy once:
its factories and triggers own those rules (delta >= 0, window >= 1, period >= 1, a known
aggregator), so they are stated in one place.
"""
from __future__ import annotations

import sys
from pathlib import Path


def _names(d) -> str:
    return ", ".join(sorted(d))


def validate_run_settings(cfg) -> None:
    from .data.partition import PARTITIONERS
    from .faults import NONFINITE_POLICIES
    from .models import MODEL_REGISTRY
    from .optim import OPTIMIZERS
    from .strategies.registry import STRATEGIES, build_strategy

    if cfg.model not in MODEL_REGISTRY:
        raise ValueError(f"unknown model {cfg.model!r}; choose one of {_names(MODEL_REGISTRY)}")
    if cfg.optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {cfg.optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
    if not cfg.weight_decay >= 0:
        raise ValueError(f"weight_decay must be >= 0, got {cfg.weight_decay!r}")
    if not cfg.momentum >= 0:
        raise ValueError(f"momentum must be >= 0, got {cfg.momentum!r}")
    if cfg.clip_norm is not None and not cfg.clip_norm > 0:
        raise ValueError(f"clip_norm must be > 0 (or unset), got {cfg.clip_norm!r}")
    if cfg.partition not in PARTITIONERS:
        raise ValueError(f"unknown partition {cfg.partition!r}; choose one of {', '.join(PARTITIONERS)}")
    if cfg.strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {cfg.strategy!r}; choose one of {', '.join(STRATEGIES)}")
    try:
        build_strategy(cfg.strategy, cfg.strategy_options, replicas=cfg.replicas, total_steps=cfg.steps,
                       steps_per_epoch=1, base_lr=cfg.lr)
    except TypeError as err:  # an option of the wrong kind (e.g. a word where a number goes)
        raise ValueError(f"strategy {cfg.strategy!r}: bad option ({err})") from None
    for name in ("divergence_every", "checkpoint_every"):
        v = getattr(cfg, name)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise ValueError(f"{name} must be an integer >= 1 (or unset), got {v!r}")
    if not isinstance(cfg.keep, int) or cfg.keep < 1:
        raise ValueError(f"keep must be an integer >= 1, got {cfg.keep!r}")
    from .costmodel import get_network, get_stragglers

    get_network(cfg.project_network)
    get_stragglers(cfg.project_stragglers)
    if cfg.project_compute_s is not None and not cfg.project_compute_s >= 0:
        raise ValueError(f"project_compute_s must be a number >= 0 (seconds per step), got {cfg.project_compute_s!r}")
    if cfg.nonfinite not in NONFINITE_POLICIES:
        raise ValueError(f"nonfinite must be one of {', '.join(NONFINITE_POLICIES)}, got {cfg.nonfinite!r}")


_REPORTED: set[str] = set()


def check_paths(cfg) -> None:
    """The filesystem side, checked before any data is read: an explicit data_dir that does
    not exist (an error for a dataset that must be prepared there; embedded datasets are
    built into it, so it is only reported), and a checkpoint dir that already holds another
    run's checkpoints when not resuming."""
    from .checkpoint import existing_steps
    from .data.sources import KNOWN

    if cfg.data_dir is not None and not Path(cfg.data_dir).is_dir():
        spec = KNOWN.get(cfg.dataset)
        if spec is None or spec.builder is None:
            raise ValueError(_missing_data_dir(cfg.dataset, str(cfg.data_dir)))
        if str(cfg.data_dir) not in _REPORTED:
            _REPORTED.add(str(cfg.data_dir))
            print(f"jaxsel: data_dir {str(cfg.data_dir)!r} does not exist; creating it and building "
                  f"the embedded dataset {cfg.dataset!r} there", file=sys.stderr, flush=True)
    root = cfg.checkpoint_root()
    if root is not None and not cfg.resume:
        steps = existing_steps(root)
        if steps:
            raise ValueError(f"checkpoint dir {str(root)!r} already holds checkpoints (newest: step "
                             f"{max(steps)}); continue that run with --resume, or choose another "
                             f"--checkpoint-dir")


def _missing_data_dir(dataset: str, data_dir: str) -> str:
    from .data.sources import KNOWN

    spec = KNOWN.get(dataset)
    hint = spec.prepare_hint(data_dir) if spec is not None else ""
    return (f"data_dir {data_dir!r} does not exist or is not a directory, so dataset {dataset!r} is not "
            f"prepared there; pass the --data-dir that holds it" + (f", or prepare it: {hint}" if hint else ""))


def parse_address(address: str) -> tuple[str, int]:
    """'HOST:PORT' -> (host, port); ValueError naming the value otherwise."""
    host, sep, port = str(address).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--coordinator must be HOST:PORT with a port in 1..65535, got {address!r}")
    return host, int(port)


def check_process_layout(coordinator: str | None, num_processes: int | None, process_id: int | None,
                         auto: bool = False, peer_timeout: float | None = None) -> None:
    """Raise ValueError for an incomplete or inconsistent process layout (before JAX starts)."""
    if peer_timeout is not None and not peer_timeout > 0:
        raise ValueError(f"--peer-timeout must be > 0 seconds, got {peer_timeout!r}")
    explicit = (coordinator, num_processes, process_id)
    if auto and any(v is not None for v in explicit):
        raise ValueError("--distributed auto detects the cluster itself; drop --coordinator/"
                         "--num-processes/--process-id, or drop --distributed auto")
    if auto or all(v is None for v in explicit):
        return
    if any(v is None for v in explicit):
        raise ValueError("a multi-host run needs all of --coordinator HOST:PORT, --num-processes P "
                         "and --process-id I (0 <= I < P), or --distributed auto")
    parse_address(coordinator)
    if not isinstance(num_processes, int) or num_processes < 1:
        raise ValueError(f"--num-processes must be an integer >= 1, got {num_processes!r}")
    if not isinstance(process_id, int) or not 0 <= process_id < num_processes:
        raise ValueError(f"--process-id must be in 0..{num_processes - 1}, got {process_id!r}")
