"""Orbax checkpoints of the whole replica-divergent TrainState.

Every leaf but `step` keeps its leading replica axis and is restored with
`NamedSharding(mesh, P("data"))`, so each replica gets back its own parameters, optimizer
state, BatchNorm statistics and trigger windows (labelling them replicated would save one
replica's copy). Beside the state, a small JSON item records what a resume needs and what
must match: the data position (batches are a pure function of (seed, replica, step), so it
is the step), the seed, the run's identity (replicas, model, strategy, dataset, a hash of
every setting that shapes the trajectory) and the loop's running totals and evaluations.

Saves are asynchronous: Orbax copies the arrays to host memory before `save` returns (so
the next step may donate the buffers) and writes them in the background; a step directory
appears only once complete. A latest checkpoint that cannot be read (truncated files) is
reported, set aside as `corrupt-<step>-<time>`, and the previous one is used.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp
from jax.sharding import NamedSharding, PartitionSpec as P

from .parallel import AXIS

FORMAT = 1
#: settings that make a checkpoint belong to another run: a clear error, never a silent mix
IDENTITY = ("replicas", "model", "strategy", "dataset")
#: settings that do not change the trajectory (free to differ on resume)
#: (`steps` may grow to extend a run; strategies scheduled by total steps follow the new total)
NOT_TRAJECTORY = frozenset({
    "steps", "eval_every", "log_every", "divergence_every", "data_dir", "out_dir", "progress",
    "prefetch", "loader_workers", "eval_examples",
    "checkpoint_dir", "checkpoint_every", "keep", "resume", "nonfinite",
    "project_network", "project_stragglers", "project_compute_s",
    "platform", "devices", "local_replicas",   # the layout: a checkpoint of 8 replicas on 8 devices resumes on 1 or 2
})


class CheckpointMismatch(ValueError):
    """The checkpoint was written by a run with other settings (replicas, model, ...)."""


class CheckpointError(RuntimeError):
    """Checkpoints exist but none can be read."""


def trajectory_config(cfg) -> dict:
    """The settings that determine a run's trajectory, as plain JSON values."""
    d = dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else dict(cfg)
    return json.loads(json.dumps({k: v for k, v in d.items() if k not in NOT_TRAJECTORY},
                                 sort_keys=True, default=str))


def run_identity(cfg) -> dict:
    """What a checkpoint must share with the run that resumes from it."""
    config = trajectory_config(cfg)
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
    return {**{k: config.get(k) for k in IDENTITY}, "seed": config.get("seed"),
            "config_hash": digest, "config": config}


def check_identity(saved: dict, current: dict, where: str) -> None:
    """Raise CheckpointMismatch naming the first differing identity field or settings."""
    for key in IDENTITY:
        if saved.get(key) != current.get(key):
            raise CheckpointMismatch(
                f"checkpoint {where} was written by a run with {key}={saved.get(key)!r}, this run "
                f"has {key}={current.get(key)!r}; resume with the same {key}, or start a fresh "
                f"run in another --checkpoint-dir")
    if saved.get("config_hash") != current.get("config_hash"):
        old, new = saved.get("config", {}), current.get("config", {})
        diff = ", ".join(f"{k} {old.get(k)!r} -> {new.get(k)!r}"
                         for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k))
        raise CheckpointMismatch(
            f"checkpoint {where} was written with other settings ({diff or 'config hash differs'}); "
            f"resume with the original settings, or start a fresh run in another --checkpoint-dir")


def existing_steps(directory: str | Path) -> list[int]:
    """Step numbers of the finished checkpoints under `directory` (a cheap listing, no Orbax)."""
    root = Path(directory)
    if not root.is_dir():
        return []
    return sorted(int(p.name) for p in root.iterdir() if p.is_dir() and p.name.isdigit())


def abstract_state(template: Any, mesh) -> Any:
    """Restore target: shape/dtype of `template` (a TrainState of arrays or of
    `jax.eval_shape` results) with the replica axis sharded over the mesh, step replicated."""
    rep, whole = NamedSharding(mesh, P(AXIS)), NamedSharding(mesh, P())
    sds = lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s)
    step = template.step
    body = jax.tree.map(lambda x: sds(x, rep), template.replace(step=None))
    return body.replace(step=sds(step, whole))


@dataclasses.dataclass
class Restored:
    state: Any
    step: int
    meta: dict


class Checkpointer:
    """`CheckpointManager` over (state, meta) items, keeping the newest `keep` steps.

    A checkpoint labelled `k` holds the state after `k` completed steps: resuming from it
    starts with step `k` (the batch of step `k`)."""

    def __init__(self, directory: str | Path, mesh, *, keep: int = 3, async_save: bool = True):
        self.directory = Path(directory).absolute()
        self.mesh = mesh
        options = ocp.CheckpointManagerOptions(
            max_to_keep=int(keep), enable_async_checkpointing=async_save, create=True,
            cleanup_tmp_directories=True,
        )
        self.manager = ocp.CheckpointManager(self.directory, options=options, item_names=("state", "meta"))

    def all_steps(self) -> list[int]:
        return sorted(self.manager.all_steps())

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(self, step: int, state: Any, meta: dict) -> None:
        """Start an asynchronous save of `state` (after `step` steps) and `meta`."""
        meta = {"format": FORMAT, "step": int(step), "data_position": int(step),
                "processes": jax.process_count(), "jax": jax.__version__, **meta}
        self.manager.save(int(step), args=ocp.args.Composite(
            state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)), force=True)

    def read_meta(self, step: int) -> dict:
        return self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta

    def restore(self, step: int, template: Any) -> Any:
        """The state saved at `step`, placed with the replica axis over the mesh."""
        target = abstract_state(template, self.mesh)
        return self.manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(target))).state

    def restore_latest(self, template: Any, identity: dict | None = None) -> Restored | None:
        """Newest readable checkpoint (None if there is none). Unreadable newer ones are
        reported and set aside; a checkpoint of another run raises CheckpointMismatch."""
        steps = self.all_steps()
        bad: list[int] = []
        for step in reversed(steps):
            where = f"{self.directory}/{step}"
            try:
                meta = self.read_meta(step)
            except Exception as err:  # noqa: BLE001 - any read failure means "corrupt"
                bad.append(step)
                _warn_unreadable(where, err, bad, steps)
                continue
            if identity is not None:
                check_identity(meta.get("identity", {}), identity, where)
            try:
                state = self.restore(step, template)
            except Exception as err:  # noqa: BLE001
                bad.append(step)
                _warn_unreadable(where, err, bad, steps)
                continue
            self._set_aside(bad)
            return Restored(state, int(step), meta)
        if bad:
            raise CheckpointError(
                f"no readable checkpoint in {self.directory} (tried steps {sorted(bad)}); "
                f"remove the directory to start over")
        return None

    def _set_aside(self, steps: list[int]) -> None:
        """Rename unreadable step directories so new saves can reuse their step numbers."""
        if not steps:
            return
        if jax.process_index() == 0:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            for step in steps:
                src = self.directory / str(step)
                if src.exists():
                    src.rename(self.directory / f"corrupt-{step}-{stamp}")
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices("jaxsel-checkpoint-set-aside")
        self.manager.reload()

    def wait(self) -> None:
        """Block until pending asynchronous saves are on disk."""
        self.manager.wait_until_finished()

    def close(self) -> None:
        self.manager.close()


def _warn_unreadable(where: str, err: Exception, bad: list[int], steps: list[int]) -> None:
    older = [s for s in steps if s < min(bad)]
    then = f"falling back to step {older[-1]}" if older else "no older checkpoint to fall back to"
    first = str(err).strip().splitlines()[0][:300] if str(err).strip() else ""
    print(f"jaxsel: warning: checkpoint {where} is unreadable ({type(err).__name__}: {first}); {then}",
          file=sys.stderr, flush=True)
