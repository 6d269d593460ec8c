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
appears only once complete.

Every checkpoint is verified on restore: its meta holds a checksum of the state's raw bits
(`state_checksum`, computed on the device at save time, a pass over memory next to Orbax's
copy to host), recomputed on the restored arrays. A latest checkpoint that cannot be read
(truncated files) or whose checksum differs (a flipped byte) is reported in one line, set
aside as `corrupt-<step>-<time>`, and the previous one is used; none good is an error.
"""
from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import logging
import os
import re
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from jax.sharding import NamedSharding, PartitionSpec as P

from ..core.parallel import AXIS
from ..core.state import STATE_FORMAT, STATE_LAYOUTS
from . import distributed
from .config import TrainConfig
from .declare import FREE, IDENTITY as IDENTITY_EFFECT, KEPT, LOCATION, REPORTED, with_effect

FORMAT = 1
#: settings that make a checkpoint belong to another run: a clear error, never a silent mix
#: (declared `effect=IDENTITY` beside each field, training/sections/)
IDENTITY = tuple(f.name for f in dataclasses.fields(TrainConfig) if f.name in with_effect(TrainConfig, IDENTITY_EFFECT))
#: settings that do not change the trajectory (free to differ on resume: every field not
#: declared to change results). `steps` may grow to extend a run; strategies scheduled by
#: total steps follow the new total, fractional LR milestones keep the first run's length,
#: `lr_schedule_steps`, recorded in the meta
NOT_TRAJECTORY = with_effect(TrainConfig, FREE, REPORTED, LOCATION, KEPT)


class CheckpointMismatch(ValueError):
    """The checkpoint was written by a run with other settings (replicas, model, ...)."""


class CheckpointError(RuntimeError):
    """Checkpoints exist but none can be read."""


class CheckpointWriteError(CheckpointError):
    """A checkpoint could not be written for a reason the user can fix (a full disk, a
    quota, a read-only or forbidden directory): one line, exit code 2."""


class CorruptCheckpoint(RuntimeError):
    """The arrays read back are not the arrays that were saved (checksum mismatch)."""


def _bits(x: jax.Array) -> jax.Array:
    """The raw bits of `x` as a flat uint32 vector (narrower types widened, wider split)."""
    x = jnp.asarray(x)
    if x.dtype == jnp.bool_:
        return x.astype(jnp.uint32).ravel()
    width = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint32}[x.dtype.itemsize]
    return jax.lax.bitcast_convert_type(x, width).astype(jnp.uint32).ravel()


@jax.jit
def _leaf_sums(tree) -> list:
    """Per leaf: the wrapping uint32 sum of its words and the sum weighted by odd
    positions (a single changed byte always changes both; swapped words change the second)."""
    out = []
    for leaf in jax.tree.leaves(tree):
        b = _bits(leaf)
        odd = (2 * jnp.arange(b.size, dtype=jnp.uint32) + 1)
        out.append(jnp.stack([jnp.sum(b, dtype=jnp.uint32), jnp.sum(b * odd, dtype=jnp.uint32)]))
    return out


def state_checksum(state) -> str:
    """A digest of every bit of `state` (one small fetch; a collective in multi-host runs)."""
    sums = distributed.to_host(_leaf_sums(state))
    return hashlib.sha256(np.asarray(sums, dtype=np.uint32).tobytes()).hexdigest()[:32]


@contextmanager
def _quiet_orbax():
    """A failed read makes Orbax and absl log long tracebacks; the fallback says it in one line."""
    loggers = [logging.getLogger(n) for n in ("absl", "orbax")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def trajectory_config(cfg) -> dict:
    """The settings that determine a run's trajectory, as plain JSON values."""
    d = dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else dict(cfg)
    return json.loads(json.dumps({k: v for k, v in d.items() if k not in NOT_TRAJECTORY},
                                 sort_keys=True, default=str))


def run_identity(cfg, data: str | None = None) -> dict:
    """What a checkpoint must share with the run that resumes from it: its settings and,
    given, the fingerprint of the training data it read (data/fingerprint.py)."""
    config = trajectory_config(cfg)
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
    return {**{k: config.get(k) for k in IDENTITY}, "seed": config.get("seed"),
            "config_hash": digest, "config": config, "state_format": STATE_FORMAT,
            **({"data": data} if data is not None else {})}


def check_identity(saved: dict, current: dict, where: str) -> None:
    """Raise CheckpointMismatch naming the first differing identity field or settings."""
    got, reads = saved.get("state_format", 1), current.get("state_format", STATE_FORMAT)
    if got != reads:
        raise CheckpointMismatch(
            f"checkpoint {where} holds its strategy state in layout {got} ({STATE_LAYOUTS.get(got, 'unknown')}); "
            f"this jaxsel reads layout {reads} ({STATE_LAYOUTS[reads]}); start a fresh run in another "
            f"--checkpoint-dir")
    for key in IDENTITY:
        if saved.get(key) != current.get(key):
            raise CheckpointMismatch(
                f"checkpoint {where} was written by a run with {key}={saved.get(key)!r}, this run "
                f"has {key}={current.get(key)!r}; resume with the same {key}, or start a fresh "
                f"run in another --checkpoint-dir")
    if None not in (saved.get("data"), current.get("data")) and saved["data"] != current["data"]:
        raise CheckpointMismatch(   # a checkpoint of a jaxsel before data fingerprints: unknown, accepted
            f"checkpoint {where} was written by a run that trained on other data (fingerprint {saved['data'][:12]}; "
            f"this run reads {current['data'][:12]}); resume with the "
            f"data it trained on (its --data-dir), or start a fresh run in another --checkpoint-dir")
    if saved.get("config_hash") != current.get("config_hash"):
        old, new = _spelt_out(saved.get("config", {})), _spelt_out(current.get("config", {}))
        diff = ", ".join(f"{k} {old.get(k)!r} -> {new.get(k)!r}"
                         for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k))
        if not diff:   # the same settings, spelt differently (`--aggregator mean`, the default)
            return
        raise CheckpointMismatch(
            f"checkpoint {where} was written with other settings ({diff}); "
            f"resume with the original settings, or start a fresh run in another --checkpoint-dir")


def _spelt_out(config: dict) -> dict:
    """A trajectory config with every strategy option at its value, one entry each (the
    strategy's default where none was given), the LR schedule as (kind, milestones,
    gamma, epoch samples), and a setting the checkpoint's jaxsel did not have yet at its
    default (it ran that way; a default that has changed since: as it was, old_records.py):
    a default and the same value given explicitly compare equal."""
    from ..core.options import option_defaults
    from ..strategies import STRATEGIES
    from .lr_schedule import read_lr_schedule
    from .old_records import today

    out = {**trajectory_config(TrainConfig()), **today(dict(config))}
    cls = STRATEGIES.get(out.get("strategy"))
    defaults = json.loads(json.dumps(option_defaults(cls), sort_keys=True, default=str)) if cls else {}
    for key, value in {**defaults, **(out.pop("strategy_options", None) or {})}.items():
        out[f"strategy_options.{key}"] = value   # one entry per option: a difference names it
    try:
        out["lr_schedule"] = list(read_lr_schedule(out.get("lr_schedule", "constant")))
    except ValueError:
        pass
    return out


def existing_steps(directory: str | Path) -> list[int]:
    """Step numbers of the finished checkpoints under `directory` (a cheap listing, no Orbax)."""
    root = Path(directory)
    if not root.is_dir():
        return []
    return sorted(int(p.name) for p in root.iterdir() if p.is_dir() and p.name.isdigit())


def newest_meta(directory: str | Path | None) -> dict:
    """The meta of the newest checkpoint under `directory` that reads as JSON ({} if none):
    what a run must know before it is built (a cheap read of Orbax's file, no Orbax)."""
    for step in reversed(existing_steps(directory) if directory is not None else []):
        try:
            meta = json.loads((Path(directory) / str(step) / "meta" / "metadata").read_text())
        except (OSError, ValueError):
            continue
        if isinstance(meta, dict):
            return meta
    return {}


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
        self._writing: int | None = None   # the step of the save in flight
        self._failed: CheckpointWriteError | None = None
        _mute_closed_loop_noise()
        _drop_write_failure_logs()

    def all_steps(self) -> list[int]:
        return sorted(self.manager.all_steps())

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(self, step: int, state: Any, meta: dict) -> None:
        """Start an asynchronous save of `state` (after `step` steps) and `meta`."""
        meta = {"format": FORMAT, "step": int(step), "data_position": int(step),
                "processes": jax.process_count(), "jax": jax.__version__,
                "checksum": state_checksum(state), **meta}
        with self._write_errors(int(step)):   # a failure of the save before this one surfaces here
            self.manager.save(int(step), args=ocp.args.Composite(
                state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)), force=True)
        self._writing = int(step)

    @contextmanager
    def _write_errors(self, step: int):
        """A save that fails on a full disk (or a quota, a read-only directory, missing rights)
        becomes one CheckpointWriteError naming the step, the file and the checkpoint kept."""
        try:
            yield
        except Exception as err:  # noqa: BLE001 - Orbax raises assorted types for a failed write
            problem = write_problem(err)
            if problem is None:
                raise
            if write_problem(err, named=True) is None:   # the OS error did not say which file: where, then
                problem += f": a file under {self.directory}"
            if self._failed is not None:   # the same failure again (waiting after the failed save)
                raise self._failed from None
            failed = self._writing if self._writing is not None else step
            good = [s for s in existing_steps(self.directory) if s < failed]
            kept = (f"the checkpoint of step {good[-1]} in {self.directory} is intact" if good
                    else f"no earlier checkpoint in {self.directory}")
            self._failed = CheckpointWriteError(
                f"the checkpoint of step {failed} could not be written ({problem}); {kept}; make room (or fix "
                f"the directory), then continue with --resume")
            raise self._failed from None

    def read_meta(self, step: int) -> dict:
        return self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta

    def restore(self, step: int, template: Any, checksum: str | None = None) -> Any:
        """The state saved at `step`, placed with the replica axis over the mesh; with
        `checksum`, CorruptCheckpoint unless the restored bits match it."""
        target = abstract_state(template, self.mesh)
        state = self.manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(target))).state
        if checksum is not None and state_checksum(state) != checksum:
            raise CorruptCheckpoint("checksum mismatch: the arrays read back differ from those saved")
        return state

    def restore_latest(self, template: Any, identity: dict | None = None,
                       max_step: int | None = None) -> Restored | None:
        """Newest readable, verified checkpoint (None if there is none). Unreadable or
        corrupt newer ones are reported and set aside; a checkpoint of another run raises
        CheckpointMismatch, and so does one past `max_step` (the run's --steps)."""
        _mute_closed_loop_noise()
        steps = self.all_steps()
        bad: list[int] = []
        for step in reversed(steps):
            where = f"{self.directory}/{step}"
            try:
                with _quiet_orbax():
                    meta = self.read_meta(step)
            except Exception as err:  # noqa: BLE001 - any read failure means "corrupt"
                bad.append(step)
                _warn_unreadable(where, err, bad, steps)
                continue
            if identity is not None:
                check_identity(meta.get("identity", {}), identity, where)
            if max_step is not None and step > max_step:
                raise CheckpointMismatch(
                    f"checkpoint {where} is past this run's end: it holds step {step}, --steps is "
                    f"{max_step}; pass --steps {step} or more to continue it")
            try:
                with _quiet_orbax():
                    state = self.restore(step, template, meta.get("checksum"))
            except Exception as err:  # noqa: BLE001
                bad.append(step)
                _warn_unreadable(where, err, bad, steps)
                continue
            self._set_aside(bad)
            return Restored(state, int(step), meta)
        if bad:
            raise CheckpointError(
                f"no readable checkpoint in {self.directory} (tried steps {sorted(bad)}, each "
                f"unreadable or corrupt); remove the directory to start over")
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
        with self._write_errors(self._writing or 0):
            self.manager.wait_until_finished()
        self._writing = None

    def close(self) -> None:
        """Close the manager: wait for its saves, then close its checkpointer, metadata
        stores and deleter. Orbax raises a failed save once per waiting call and then goes
        on, but its `close` stops at that raise and leaves the rest open (threads and
        storage writes still running when the interpreter exits, where Python 3.11 kills a
        thread that calls back into it and the process aborts): so a close that raised
        the write failure (reported already, `_write_errors`) is repeated until it is done."""
        for _ in range(CLOSE_TRIES):
            try:
                self.manager.close()
                return
            except Exception as err:  # noqa: BLE001 - a failed write already reported (or being reported)
                if write_problem(err) is None:
                    raise


#: a manager's close raises each stored write failure once (its save's, its checkpointer's)
CLOSE_TRIES = 4


#: failures of a write the user can fix: a full disk, a quota, a read-only or forbidden directory
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM})


def write_problem(err: BaseException | str, named: bool = False) -> str | None:
    """"No space left on device: FILE" for a failed write the user can fix (Orbax reports the
    OS error inside tensorstore's message), else None (a bug: its traceback stays); with
    `named`, None too where the error does not name the file."""
    text = str(err)
    code = getattr(err, "errno", None)
    found = re.search(r"os_error_code='(\d+)'", text) or re.search(r"\[Errno (\d+)\]", text)
    if code is None and found:
        code = int(found.group(1))
    if code not in WRITE_ERRNOS:
        return None
    where = re.search(r'(?:Failed writing|local file): "([^"]+)"', text)
    path = getattr(err, "filename", None) or (where.group(1) if where else None)
    if named and not path:
        return None
    return os.strerror(code) + (f": {path}" if path else "")


class _WriteFailureLogs(logging.Filter):
    """A failed write (a full disk, ...) is logged with its traceback by every Orbax save
    thread that sees it, and once more by asyncio for each future nobody read ("exception
    was never retrieved", even at exit): about 290 lines for one full disk. The training
    loop gets the same error (`Checkpointer._write_errors`) and says it in one line, so
    exactly those records are dropped; any other error is logged as before."""

    def filter(self, record: logging.LogRecord) -> bool:
        err = record.exc_info[1] if record.exc_info else None
        return write_problem(err if err is not None else record.getMessage()) is None


def _drop_write_failure_logs() -> None:
    for name in ("absl", "asyncio"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _WriteFailureLogs) for f in logger.filters):
            logger.addFilter(_WriteFailureLogs())


_NOISE_MUTED = False


def _mute_closed_loop_noise() -> None:
    """During and after a failed read, Orbax's storage futures keep calling back into an
    event loop it already closed, each printing a traceback ("Event loop is closed", a
    dozen per checkpoint) through the unraisable-exception hook or, from tensorstore's
    threads, through sys.excepthook. They say nothing the warning line does not: drop
    exactly those, from before the first read on."""
    global _NOISE_MUTED
    if _NOISE_MUTED:
        return
    _NOISE_MUTED = True
    noise = lambda err: isinstance(err, RuntimeError) and str(err) == "Event loop is closed"
    unraisable, excepthook, thread_hook = sys.unraisablehook, sys.excepthook, threading.excepthook
    sys.unraisablehook = lambda u: None if noise(u.exc_value) else unraisable(u)
    sys.excepthook = lambda kind, err, tb: None if noise(err) else excepthook(kind, err, tb)
    threading.excepthook = lambda a: None if noise(a.exc_value) else thread_hook(a)


class _UnreadableCheckpointLogs(logging.Filter):
    """A failed read leaves Orbax's deserialization tasks holding the error; asyncio logs
    each when it is garbage-collected ("Task exception was never retrieved", a traceback
    and tensorstore's spec: about 40 lines), which can happen after `_quiet_orbax` has
    ended. The warning line has said it: the records naming a checkpoint reported
    unreadable are dropped; any other is logged as before."""

    unreadable: set[str] = set()   # the step directories reported, as given and absolute

    def filter(self, record: logging.LogRecord) -> bool:
        err = record.exc_info[1] if record.exc_info else None
        text = record.getMessage() + (str(err) if err is not None else "")
        return not any(f"{path}/" in text for path in self.unreadable)


def _drop_unreadable_read_logs(where: str) -> None:
    _UnreadableCheckpointLogs.unreadable.update({where, os.path.abspath(where)})
    for name in ("absl", "asyncio", "orbax"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _UnreadableCheckpointLogs) for f in logger.filters):
            logger.addFilter(_UnreadableCheckpointLogs())


def _warn_unreadable(where: str, err: Exception, bad: list[int], steps: list[int]) -> None:
    _mute_closed_loop_noise()
    _drop_unreadable_read_logs(where)
    older = [s for s in steps if s < min(bad)]
    then = f"falling back to step {older[-1]}" if older else "no older checkpoint to fall back to"
    first = str(err).strip().splitlines()[0][:300] if str(err).strip() else ""
    print(f"jaxsel: warning: checkpoint {where} is unreadable ({type(err).__name__}: {first}); {then}",
          file=sys.stderr, flush=True)
