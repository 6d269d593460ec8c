"""The training loop: asynchronous step dispatch, periodic metric reads, evaluation,
JSON-lines logging and progress; checkpoints and resume (checkpoint.py), NaN and signal
handling (faults.py) and multi-host runs (distributed.py).

Steps are dispatched without waiting; metrics stay on the device and are fetched every
`log_every` steps (one host round-trip per window, never per step).
"""
from __future__ import annotations

import dataclasses
import json
import math
import signal
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from . import distributed, parallel
from .checkpoint import Checkpointer, run_identity
from .costmodel import Projector
from .data import Loader
from .data.pipeline import build_input
from .data.sources import KNOWN
from .faults import MAX_CONSECUTIVE_SKIPS, NonFiniteError, StopSignals, TrainingInterrupted, \
    describe_nonfinite, guard_nonfinite
from .models import FunctionalModel, build_model
from .optim import build_optimizer
from .state import consensus, consensus_model_state, divergence, init_state
from .step import make_train_step
from .strategies.registry import build_strategy
from .validation import check_paths


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
    # checkpoints and faults (checkpoint.py, faults.py): checkpointing is on when any of
    # checkpoint_dir / checkpoint_every / resume is set; the dir defaults to
    # checkpoints/<run> (<run>: out_dir's name, else strategy-dataset-model-seedN)
    checkpoint_dir: str | None = None
    checkpoint_every: int | None = None  # steps between asynchronous saves (None: only at the end / on a signal)
    keep: int = 3                   # newest checkpoints kept
    resume: bool = False            # continue from the newest readable checkpoint
    nonfinite: str = "stop"         # NaN/inf loss or gradient: "stop" the run, or "skip" the step on device
    # projected wall-clock (costmodel.py): every logged step carries `projected_time_s`, what
    # the run would have taken so far on `project_network` with the same replicas, sync
    # pattern and `project_stragglers`, from this run's measured step time (or
    # `project_compute_s`, e.g. a GPU step time measured elsewhere)
    project_network: str = "10gbe"
    project_stragglers: str | None = None
    project_compute_s: float | None = None

    def checkpoint_root(self) -> Path | None:
        """Where checkpoints go, or None when checkpointing is off."""
        if not (self.checkpoint_dir or self.checkpoint_every or self.resume):
            return None
        if self.checkpoint_dir:
            return Path(self.checkpoint_dir)
        name = Path(self.out_dir).name if self.out_dir else \
            f"{self.strategy}-{self.dataset}-{self.model}-seed{self.seed}"
        return Path("checkpoints") / name

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
        from .validation import validate_run_settings

        validate_run_settings(self)


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
    check_paths(cfg)
    if distributed.is_multiprocess() and cfg.replicas != jax.device_count():
        raise ValueError(f"a multi-host run uses every device: replicas must be {jax.device_count()} "
                         f"({jax.process_count()} processes x {jax.local_device_count()} devices), "
                         f"got {cfg.replicas}")
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


def _records_from(metrics_window: list[tuple[int, dict]], fetch=jax.device_get) -> list[dict]:
    """Fetch a window of on-device metrics in one transfer and split them per step."""
    fetched = fetch([m for _, m in metrics_window])
    out = []
    for (t, _), m in zip(metrics_window, fetched):
        rec = {"step": t}
        for k, v in m.items():
            v = np.asarray(v)
            rec[k] = v.item() if v.ndim == 0 else v.tolist()
        out.append(rec)
    return out


def _earlier_records(log_path: Path, start: int) -> list[dict]:
    """Resuming at `start`: the log's records of steps before it (later ones are redone)."""
    if not log_path.exists():
        return []
    keep = []
    for line in log_path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:  # a line cut off by the interruption
            continue
        if rec.get("step", start) < start:
            keep.append(rec)
    return keep


def train(cfg: TrainConfig, run: Run | None = None) -> RunResult:
    """Train per `cfg`; returns per-step records, evaluations and final figures.

    With checkpointing on (see `TrainConfig.checkpoint_root`) the state is saved every
    `checkpoint_every` steps, at the end and on SIGTERM/SIGINT (then `TrainingInterrupted`
    is raised); `resume` continues from the newest readable checkpoint and the metrics
    log continues where it left off. A non-finite loss or gradient raises
    `NonFiniteError` (or skips the step: `nonfinite="skip"`); see faults.py.
    """
    run = run or build_run(cfg)
    state, loader = run.state, run.loader
    multi, lead = distributed.is_multiprocess(), jax.process_index() == 0
    distributed.barrier("train-start")   # every process has its data before the first collective
    fetch = distributed.to_host
    div_every = cfg.divergence_every or cfg.log_every
    step_fn = guard_nonfinite(run.step_fn) if cfg.nonfinite == "skip" else run.step_fn
    root = cfg.checkpoint_root()
    ckpt = Checkpointer(root, run.mesh, keep=cfg.keep) if root is not None else None
    identity = run_identity(cfg)
    start, history = 0, {}
    if ckpt is not None and cfg.resume:
        restored = ckpt.restore_latest(state, identity)
        if restored is not None:
            state, start, history = restored.state, restored.step, restored.meta
        if lead:
            print(f"jaxsel: resuming from the checkpoint of step {start} in {ckpt.directory}" if start
                  else f"jaxsel: no checkpoint in {ckpt.directory} yet; starting from step 0",
                  file=sys.stderr, flush=True)

    out_dir = Path(cfg.out_dir) if cfg.out_dir and lead else None   # one writer: process 0
    log_file, records = None, []
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "config.json").write_text(json.dumps(_to_jsonable(dataclasses.asdict(cfg)), indent=2))
        if start:
            records = _earlier_records(out_dir / "metrics.jsonl", start)
        log_file = open(out_dir / "metrics.jsonl", "w")
        log_file.writelines(json.dumps(r) + "\n" for r in records)

    t0 = time.perf_counter()
    compiled = step_fn.lower(state, parallel.global_batch(loader.batch(start), run.mesh)).compile()
    compile_time = time.perf_counter() - t0

    counters = history.get("counters", {})
    evals, window, divs = list(history.get("evals", [])), [], {}
    bar = _progress(cfg, run.strategy) if lead else None
    if bar is not None and start:
        bar.update(start)
    proj = Projector(cfg.project_network, cfg.replicas, cfg.steps, cfg.project_stragglers, cfg.seed,
                     **run.strategy.timing(cfg.replicas)._asdict(), state=counters.get("projector"))
    projected = float(counters.get("projected_time_s", 0.0))
    train_time = float(counters.get("train_time_s", 0.0))
    bytes_total = int(counters.get("bytes_allreduced", 0))
    synced_total = int(counters.get("synced_steps", 0))
    skipped_total, skip_run = int(counters.get("skipped_steps", 0)), 0

    def do_eval(step):
        params = consensus(state.replace(params=run.strategy.eval_params(state)))
        model_state = consensus_model_state(state)
        if multi:  # global arrays -> host copies, evaluated by each process on its own device
            params, model_state = fetch((params, model_state))
        res = run.evaluate(params, model_state, run.test)
        evals.append({"step": step, **res, "train_time_s": train_time, "projected_time_s": projected,
                      "bytes_allreduced": bytes_total})
        return res

    def flush(t):
        """Fetch the metrics window, check it for non-finite values, log it."""
        nonlocal window, bytes_total, synced_total, skipped_total, skip_run, train_time, projected
        new = _records_from(window, fetch)
        window = []
        div_values = fetch({s: divs.pop(s) for s in [r["step"] for r in new] if s in divs})
        bad = None
        for i, rec in enumerate(new):
            if rec["step"] in div_values:
                rec["divergence"] = float(div_values[rec["step"]])
            bytes_total += int(rec["bytes_allreduced"])
            synced_total += bool(rec["synced"])
            if cfg.nonfinite == "skip":
                skip_run = skip_run + 1 if rec["nonfinite"] else 0
                skipped_total += bool(rec["nonfinite"])
                if skip_run >= MAX_CONSECUTIVE_SKIPS and bad is None:
                    bad = i
            elif bad is None and describe_nonfinite(rec):
                bad = i
        if bad is not None:
            new = new[:bad + 1]
        elapsed = time.perf_counter() - tick
        train_time += elapsed
        step_s = cfg.project_compute_s if cfg.project_compute_s is not None else elapsed / max(len(new), 1)
        for rec in new:
            rec["train_time_s"] = train_time
            vote = int(rec.get("vote_bytes", 0))
            projected = proj.advance(rec["step"], bool(rec["synced"]), int(rec["bytes_allreduced"]) - vote,
                                     vote, step_s)
            rec["projected_time_s"] = projected
        records.extend(new)
        if log_file:
            log_file.writelines(json.dumps(_to_jsonable(r)) + "\n" for r in new)
            log_file.flush()
        if bar is not None:
            bar.update(len(new))
            bar.set_postfix(loss=f"{new[-1]['loss']:.3f}", sync=f"{synced_total / (t + 1):.2f}")
        skipped = [r["step"] for r in new if r.get("nonfinite")]
        if skipped and lead:
            print(f"jaxsel: warning: skipped non-finite step(s) {skipped} (state left unchanged)",
                  file=sys.stderr, flush=True)
        if bad is not None:
            raise _nonfinite_error(new[-1], cfg, ckpt)

    def save(step):
        meta = {"identity": identity, "seed": cfg.seed, "evals": _to_jsonable(evals),
                "counters": {"train_time_s": train_time, "bytes_allreduced": bytes_total,
                             "projected_time_s": projected, "projector": proj.state(),
                             "synced_steps": synced_total, "skipped_steps": skipped_total}}
        ckpt.save(step, state, meta)

    if not evals:
        do_eval(start)
    on_cpu = run.mesh.devices.flat[0].platform == "cpu"
    serialize = distributed.serialize_steps()
    every = cfg.checkpoint_every
    tick = time.perf_counter()
    try:
        with StopSignals() as signals:
            for t, batch in loader.iterate(start, cfg.steps):
                state, metrics = compiled(state, batch)
                window.append((t, metrics))
                if serialize:
                    jax.block_until_ready(state)  # gloo: no overlapping multi-process programs
                elif on_cpu and (t + 1) % CPU_MAX_INFLIGHT == 0:
                    jax.block_until_ready(metrics)  # see CPU_MAX_INFLIGHT
                if (t + 1) % div_every == 0:
                    divs[t] = divergence(state.params)
                    if serialize:
                        jax.block_until_ready(divs[t])
                last = t + 1 == cfg.steps
                boundary = (t + 1) % cfg.log_every == 0 or last
                # every process must stop at the same step: multi-host agrees at log reads
                if multi:
                    halt = boundary and distributed.agree_any(signals.signum is not None)
                else:
                    halt = signals.signum is not None
                halt = halt and not last   # a signal during the last step: just finish
                eval_due = (t + 1) % cfg.eval_every == 0 or last
                save_due = ckpt is not None and (last or halt or bool(every and (t + 1) % every == 0))
                if boundary or eval_due or save_due or halt:
                    flush(t)   # before a save: a checkpoint never holds an unchecked step
                    if eval_due:
                        do_eval(t + 1)
                    if save_due:
                        save(t + 1)
                    tick = time.perf_counter()   # evaluation and saving are not training time
                if halt:
                    if ckpt is not None:
                        ckpt.wait()
                    raise TrainingInterrupted(signals.signum or signal.SIGTERM, t + 1,
                                              str(ckpt.directory) if ckpt is not None else None)
            if start >= cfg.steps and (not evals or evals[-1]["step"] != cfg.steps):
                do_eval(cfg.steps)   # resumed a finished run
    finally:
        if bar is not None:
            bar.close()
        if log_file:
            log_file.close()
        if ckpt is not None:
            ckpt.wait()
            ckpt.close()

    final = {
        "strategy": run.strategy.describe() if hasattr(run.strategy, "describe") else cfg.strategy,
        "final_test_accuracy": evals[-1]["test_accuracy"],
        "final_test_loss": evals[-1]["test_loss"],
        "final_train_loss": float(np.mean([r["loss"] for r in records[-cfg.log_every:]])) if records else float("nan"),
        "sync_fraction": synced_total / cfg.steps,
        "bytes_allreduced": bytes_total,
        "wall_time_s": train_time,
        "compile_time_s": compile_time,
        "projected_time_s": proj.summary()["total"],
        "projection": proj.summary(),
        "steps": cfg.steps,
        "replicas": cfg.replicas,
    }
    if cfg.nonfinite == "skip":
        final["skipped_steps"] = skipped_total
    if start:
        final["resumed_from_step"] = start
    if out_dir:
        (out_dir / "evals.json").write_text(json.dumps(_to_jsonable(evals), indent=2))
        (out_dir / "final.json").write_text(json.dumps(_to_jsonable(final), indent=2))
    return RunResult(cfg, records, evals, final, state, cfg.strategy)


def _nonfinite_error(rec: dict, cfg: TrainConfig, ckpt) -> NonFiniteError:
    step = rec["step"]
    if cfg.nonfinite == "skip":
        what = f"{MAX_CONSECUTIVE_SKIPS} consecutive steps were non-finite (the state itself may be)"
    else:
        what = f"non-finite {describe_nonfinite(rec)}"
    if ckpt is not None:
        ckpt.wait()
        good = ckpt.latest_step()
        kept = (f"the last good checkpoint is step {good} in {ckpt.directory} (continue from it with "
                f"--resume after lowering --lr or setting --clip-norm, or use --nonfinite skip)"
                if good is not None else f"no checkpoint was written yet to {ckpt.directory}")
    else:
        kept = "checkpointing is off, nothing to roll back to"
    return NonFiniteError(f"{what} at step {step}; training stopped, {kept}", step)


def _progress(cfg: TrainConfig, strategy):
    if not cfg.progress:
        return None
    from tqdm.auto import tqdm

    import sys

    interactive = sys.stderr.isatty()
    return tqdm(total=cfg.steps, desc=f"{cfg.strategy:>9}", unit="step", leave=True,
                dynamic_ncols=True, mininterval=0.2 if interactive else 5.0)
