"""The training loop: asynchronous step dispatch, periodic metric reads, evaluation,
JSON-lines logging and progress.

Steps are dispatched without waiting; metrics stay on the device and are fetched every
`log_every` steps (one host round-trip per window, never per step).
"""
from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from . import parallel
from .data import Loader
from .data.pipeline import build_input
from .data.sources import KNOWN
from .models import FunctionalModel, build_model
from .optim import build_optimizer
from .state import consensus, consensus_model_state, divergence, init_state
from .step import make_train_step
from .strategies.registry import build_strategy


# Simulated CPU devices share a few cores: with dozens of collective steps queued, XLA's
# CPU rendezvous can time out (observed at 50+ queued BSP steps on 2 cores). On CPU the
# loop waits for the device every this many steps; on accelerators it never waits per step.
CPU_MAX_INFLIGHT = 8


@dataclasses.dataclass
class TrainConfig:
    dataset: str = "digits"
    model: str = "mlp"
    strategy: str = "selsync"
    strategy_options: dict = dataclasses.field(default_factory=dict)
    replicas: int = 8
    batch_size: int = 16            # per replica
    steps: int = 600
    optimizer: str = "sgd"
    lr: float = 0.05
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
    progress: bool = True
    # data pipeline (jaxsel/data): dataset_options: seq_len, in_memory, records_per_window
    # (token/big sets), num_samples/seed (mnist1d); partition_options may hold
    # injection=(alpha, beta); augment None = the dataset's default crop+flip
    dataset_options: dict = dataclasses.field(default_factory=dict)
    augment: bool | None = None
    prefetch: int = 2               # batches placed on the devices ahead of the step
    loader_workers: int = 2         # host threads building batches (decoding big images)
    eval_examples: int | None = None  # evaluate on the first N test examples (None: all)

    def validate(self) -> None:
        """Raise ValueError naming the first bad value and what is allowed."""
        ints = {"replicas": 1, "batch_size": 1, "steps": 1, "eval_every": 1, "log_every": 1}
        for name, low in ints.items():
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or v < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")
        if self.dataset not in KNOWN:
            raise ValueError(f"unknown dataset {self.dataset!r}; choose one of {', '.join(sorted(KNOWN))}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr!r}")


@dataclasses.dataclass
class RunResult:
    config: TrainConfig
    records: list[dict]            # one per step
    evals: list[dict]              # {step, test_accuracy, test_loss}
    final: dict
    state: Any
    strategy_name: str


def _to_jsonable(x):
    if isinstance(x, dict):
        return {k: _to_jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_to_jsonable(v) for v in x]
    if isinstance(x, (np.ndarray, jax.Array)):
        return _to_jsonable(np.asarray(x).tolist())
    if isinstance(x, (np.floating, float)):
        return None if not math.isfinite(float(x)) else float(x)
    if isinstance(x, (np.bool_, bool)):
        return bool(x)
    if isinstance(x, np.integer):
        return int(x)
    return x


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


def build_run(cfg: TrainConfig) -> Run:
    cfg.validate()
    mesh = parallel.data_mesh(cfg.replicas)
    data = build_input(cfg, mesh)   # tables, partition/injection, prefetching loader, transform
    spec, loader, partition = data.spec, data.loader, data.loader.partition
    model = build_model(cfg.model, data.input_shape, data.num_classes, seed=cfg.seed)
    fm = FunctionalModel.from_module(model)
    optimizer = build_optimizer(cfg.optimizer, cfg.lr, cfg.momentum, cfg.weight_decay, cfg.clip_norm)
    strategy = build_strategy(
        cfg.strategy, cfg.strategy_options, replicas=cfg.replicas, total_steps=cfg.steps,
        steps_per_epoch=partition.steps_per_epoch(cfg.batch_size), base_lr=cfg.lr,
    )
    state = init_state(fm.params, optimizer, strategy, mesh, model_state=fm.model_state)
    loss_fn = fm.classification_loss(spec.input_key, spec.label_key)
    step_fn = data.wrap_step(make_train_step(loss_fn, optimizer, strategy, mesh, stateful=fm.stateful))
    return Run(cfg, mesh, fm, optimizer, strategy, state, step_fn, loader, data.test,
               make_eval_fn(fm, spec))


def _records_from(metrics_window: list[tuple[int, dict]]) -> list[dict]:
    """Fetch a window of on-device metrics in one transfer and split them per step."""
    fetched = jax.device_get([m for _, m in metrics_window])
    out = []
    for (t, _), m in zip(metrics_window, fetched):
        rec = {"step": t}
        for k, v in m.items():
            v = np.asarray(v)
            rec[k] = v.item() if v.ndim == 0 else v.tolist()
        out.append(rec)
    return out


def train(cfg: TrainConfig, run: Run | None = None) -> RunResult:
    """Train per `cfg`; returns per-step records, evaluations and final figures."""
    run = run or build_run(cfg)
    state, loader = run.state, run.loader
    div_every = cfg.divergence_every or cfg.log_every
    out_dir = Path(cfg.out_dir) if cfg.out_dir else None
    log_file = None
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "config.json").write_text(json.dumps(_to_jsonable(dataclasses.asdict(cfg)), indent=2))
        log_file = open(out_dir / "metrics.jsonl", "w")

    t0 = time.perf_counter()
    compiled = run.step_fn.lower(state, loader.batch(0)).compile()
    compile_time = time.perf_counter() - t0

    records, evals, window, divs = [], [], [], {}
    bar = _progress(cfg, run.strategy)
    train_time, bytes_total, synced_total = 0.0, 0, 0

    def do_eval(step):
        res = run.evaluate(consensus(state), consensus_model_state(state), run.test)
        evals.append({"step": step, **res, "train_time_s": train_time, "bytes_allreduced": bytes_total})
        return res

    do_eval(0)
    on_cpu = run.mesh.devices.flat[0].platform == "cpu"
    tick = time.perf_counter()
    for t, batch in loader.iterate(0, cfg.steps):
        state, metrics = compiled(state, batch)
        window.append((t, metrics))
        if on_cpu and (t + 1) % CPU_MAX_INFLIGHT == 0:
            jax.block_until_ready(metrics)  # see CPU_MAX_INFLIGHT
        if (t + 1) % div_every == 0:
            divs[t] = divergence(state.params)
        last = t + 1 == cfg.steps
        if (t + 1) % cfg.log_every == 0 or last or (t + 1) % cfg.eval_every == 0:
            new = _records_from(window)
            window = []
            for rec in new:
                if rec["step"] in divs:
                    rec["divergence"] = float(divs.pop(rec["step"]))
                bytes_total += int(rec["bytes_allreduced"])
                synced_total += bool(rec["synced"])
            train_time += time.perf_counter() - tick
            for rec in new:
                rec["train_time_s"] = train_time
            records.extend(new)
            if log_file:
                log_file.writelines(json.dumps(_to_jsonable(r)) + "\n" for r in new)
                log_file.flush()
            if bar is not None:
                bar.update(len(new))
                bar.set_postfix(loss=f"{new[-1]['loss']:.3f}", sync=f"{synced_total / (t + 1):.2f}")
            if (t + 1) % cfg.eval_every == 0 or last:
                do_eval(t + 1)
            tick = time.perf_counter()
    if bar is not None:
        bar.close()
    if log_file:
        log_file.close()

    final = {
        "strategy": run.strategy.describe() if hasattr(run.strategy, "describe") else cfg.strategy,
        "final_test_accuracy": evals[-1]["test_accuracy"],
        "final_test_loss": evals[-1]["test_loss"],
        "final_train_loss": float(np.mean([r["loss"] for r in records[-cfg.log_every:]])),
        "sync_fraction": synced_total / cfg.steps,
        "bytes_allreduced": bytes_total,
        "wall_time_s": train_time,
        "compile_time_s": compile_time,
        "steps": cfg.steps,
        "replicas": cfg.replicas,
    }
    if out_dir:
        (out_dir / "evals.json").write_text(json.dumps(_to_jsonable(evals), indent=2))
        (out_dir / "final.json").write_text(json.dumps(_to_jsonable(final), indent=2))
    return RunResult(cfg, records, evals, final, state, cfg.strategy)


def _progress(cfg: TrainConfig, strategy):
    if not cfg.progress:
        return None
    from tqdm.auto import tqdm

    import sys

    interactive = sys.stderr.isatty()
    return tqdm(total=cfg.steps, desc=f"{cfg.strategy:>9}", unit="step", leave=True,
                dynamic_ncols=True, mininterval=0.2 if interactive else 5.0)
