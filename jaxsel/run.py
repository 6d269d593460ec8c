"""Run assembly: everything a training run is made of, built once from a TrainConfig.

The mesh, the data side, the model, the optimizer, the strategy (built here and nowhere
else), the initial state, the jitted step and the evaluation. The three places that talk
to the strategy layer beyond building it are `strategy_timing`, `describe_strategy` and
`evaluation_weights`.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from . import distributed, parallel
from .checkpoint import existing_steps
from .config import ConfigError, TrainConfig, check_config
from .data import Loader
from .data.pipeline import build_input
from .data.sources import KNOWN
from .models import FunctionalModel, build_model
from .optim import build_optimizer
from .state import consensus, consensus_model_state, init_state
from .step import make_train_step
from .strategies.registry import build_strategy


@dataclasses.dataclass
class Run:
    """Everything a training run is made of, built from a TrainConfig."""

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
    layout: str           # where the replicas run (`parallel.describe_layout`), printed and recorded


def build_run(cfg: TrainConfig) -> Run:
    check_config(cfg)
    check_paths(cfg)
    mesh = make_mesh(cfg)
    data = build_input(cfg, mesh)   # tables, partition/injection, prefetching loader, transform
    spec, loader = data.spec, data.loader
    model = build_model(cfg.model, data.input_shape, data.num_classes, seed=cfg.seed)
    fm = FunctionalModel.from_module(model)
    optimizer = build_optimizer(cfg.optimizer, cfg.lr, cfg.momentum, cfg.weight_decay, cfg.clip_norm)
    strategy = make_strategy(cfg, loader.partition.steps_per_epoch(cfg.batch_size))
    state = init_state(fm.params, optimizer, strategy, mesh, model_state=fm.model_state)
    loss_fn = fm.classification_loss(spec.input_key, spec.label_key)
    step_fn = data.wrap_step(make_train_step(loss_fn, optimizer, strategy, mesh, stateful=fm.stateful,
                                             local_replicas=cfg.local_replicas))
    return Run(cfg, mesh, fm, optimizer, strategy, state, step_fn, loader, data.test,
               make_eval_fn(fm, spec), strategy_timing(strategy, cfg.replicas),
               describe_strategy(strategy, cfg.strategy), parallel.describe_layout(mesh))


def make_mesh(cfg: TrainConfig):
    """The run's replicas on its devices; replicas that do not fit are a ConfigError.
    A multi-host run uses every device of every process (replicas: a multiple of them)."""
    n = jax.device_count()
    if distributed.is_multiprocess() and (cfg.replicas % n or cfg.devices not in (None, n)):
        raise ConfigError(f"a multi-host run uses every device: replicas must be a multiple of {n} "
                          f"({jax.process_count()} processes x {jax.local_device_count()} devices), "
                          f"got {cfg.replicas}")
    try:
        return parallel.data_mesh(cfg.replicas, devices=cfg.devices, platform=cfg.platform)
    except parallel.LayoutError as err:
        raise ConfigError(str(err)) from None


def make_strategy(cfg: TrainConfig, steps_per_epoch: int):
    """The run's strategy; a bad option is a ConfigError (one line, exit 2)."""
    try:
        return build_strategy(cfg.strategy, cfg.strategy_options, replicas=cfg.replicas, total_steps=cfg.steps,
                              steps_per_epoch=steps_per_epoch, base_lr=cfg.lr)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    except TypeError as err:  # an option of the wrong kind (e.g. a word where a number goes)
        raise ConfigError(f"strategy {cfg.strategy!r}: bad option ({err})") from None


def strategy_timing(strategy, replicas: int) -> dict:
    """The strategy's cost-model keywords (`costmodel.Projector`), as plain JSON values."""
    timing = strategy.timing(replicas) if hasattr(strategy, "timing") else {}
    return dict(timing._asdict() if hasattr(timing, "_asdict") else timing)


def describe_strategy(strategy, name: str) -> str:
    return strategy.describe() if hasattr(strategy, "describe") else name


def evaluation_weights(state, strategy) -> tuple[Any, Any]:
    """(params, model_state) the strategy evaluates: its eval params averaged over replicas."""
    return consensus(state.replace(params=strategy.eval_params(state))), consensus_model_state(state)


def make_eval_fn(fm: FunctionalModel, spec, batch_size: int = 512):
    """Accuracy and mean loss of (params, model_state) on a full in-memory split."""
    logits_fn = jax.jit(fm.logits_fn(spec.input_key))

    def evaluate(params, model_state, arrays) -> dict:
        correct, total_loss, n, rows = 0, 0.0, 0, len(arrays[spec.label_key])
        for i in range(0, rows, batch_size):
            batch = {k: v[i:i + batch_size] for k, v in arrays.items()}
            logits = logits_fn(params, model_state, batch)
            labels = batch[spec.label_key]
            correct += int(jnp.sum(jnp.argmax(logits, -1) == labels))
            total_loss += float(optax.softmax_cross_entropy_with_integer_labels(logits, labels).sum())
            n += int(np.size(labels))  # per token for language models
        return {"test_accuracy": correct / n, "test_loss": total_loss / n}

    return evaluate


_REPORTED: set[str] = set()


def check_paths(cfg: TrainConfig) -> None:
    """The filesystem side, checked before any data is read: an explicit data_dir that does
    not exist (an error for a dataset that must be prepared there; embedded datasets are
    built into it, so it is only reported), and a checkpoint dir that already holds another
    run's checkpoints when not resuming."""
    if cfg.data_dir is not None and not Path(cfg.data_dir).is_dir():
        spec = KNOWN.get(cfg.dataset)
        if spec is None or spec.builder is None:
            hint = spec.prepare_hint(str(cfg.data_dir)) if spec is not None else ""
            raise ConfigError(
                f"data_dir {str(cfg.data_dir)!r} does not exist or is not a directory, so dataset "
                f"{cfg.dataset!r} is not prepared there; pass the --data-dir that holds it"
                + (f", or prepare it: {hint}" if hint else ""))
        if str(cfg.data_dir) not in _REPORTED:
            _REPORTED.add(str(cfg.data_dir))
            print(f"jaxsel: data_dir {str(cfg.data_dir)!r} does not exist; creating it and building "
                  f"the embedded dataset {cfg.dataset!r} there", file=sys.stderr, flush=True)
    root = cfg.checkpoint_root()
    if root is not None and not cfg.resume:
        steps = existing_steps(root)
        if steps:
            raise ConfigError(f"checkpoint dir {str(root)!r} already holds checkpoints (newest: step "
                              f"{max(steps)}); continue that run with --resume, or choose another "
                              f"--checkpoint-dir")
