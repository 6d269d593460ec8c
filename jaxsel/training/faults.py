"""Faults during training: stop signals and non-finite losses or gradients.

Non-finite values, two policies (`TrainConfig.nonfinite`):

* ``"stop"`` (default): nothing extra runs per step. The metrics the loop fetches every
  `log_every` steps (and before every checkpoint) are checked on the host; the first
  non-finite loss or gradient norm stops the run with `NonFiniteError` naming the step.
  A checkpoint is written only after the steps before it were checked, so the newest
  checkpoint on disk is always a good one: rolling back is `--resume`.
* ``"skip"``: decided on the device, inside the jitted step. A replicated flag (the loss
  is already a cross-replica mean; the per-replica gradient norms are reduced over the
  mesh) selects with `jnp.where` between the new state and the old one, so a bad step
  leaves parameters, optimizer, model and trigger state unchanged - only the step counter
  (the data position) advances. No host round-trip; `metrics["nonfinite"]` records it.
  A run whose every step is skipped for `MAX_CONSECUTIVE_SKIPS` steps stops anyway.

Signals: SIGTERM and SIGINT (Ctrl-C) ask the loop to finish the step in flight, save a
checkpoint and leave with `TrainingInterrupted` (the CLI exits 128 + the signal's number,
as a shell reports a process ended by it: 143 for SIGTERM, 130 for SIGINT, so a scheduler
never takes an interrupted run for a finished one). The handlers are installed before the
run is built, so a signal during start-up (data, compilation) stops the run too, at its
first step, with nothing new to save; one the command received even earlier, before JAX
was imported (early_stop.py), is taken over. A second Ctrl-C aborts at once.
"""
from __future__ import annotations

import math
import signal
import sys
import threading
from typing import Any, Callable

import jax
import jax.numpy as jnp

from ..core.choices import NONFINITE_POLICIES
from . import early_stop

MAX_CONSECUTIVE_SKIPS = 50


class NonFiniteError(FloatingPointError):
    """The loss or a gradient became NaN/inf at `step`."""

    def __init__(self, message: str, step: int):
        super().__init__(message)
        self.step = step


class TrainingInterrupted(Exception):
    """Stopped on a signal after `step` steps; `checkpoint` is where it was saved (or None)."""

    def __init__(self, signum: int, step: int, checkpoint: str | None):
        self.signum, self.step, self.checkpoint = signum, step, checkpoint
        name = signal.Signals(signum).name
        #: what happened, without how to go on (the command line adds the command that continues)
        self.what = (f"received {name}: stopped after step {step}, "
                     + (f"saved checkpoint at step {step} in {checkpoint}" if checkpoint else "no checkpoint saved"))
        super().__init__(self.what + ("; continue with --resume" if checkpoint else ""))

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signum)


def describe_nonfinite(rec: dict) -> str | None:
    """What is non-finite in one step's metrics record (None when all is finite)."""
    loss = rec.get("loss")
    bad = []
    if loss is None or not math.isfinite(float(loss)):
        bad.append(f"loss={loss}")
    norms = rec.get("grad_norm")
    if norms is not None:
        norms = norms if isinstance(norms, list) else [norms]
        replicas = [i for i, g in enumerate(norms) if g is None or not math.isfinite(float(g))]
        if replicas:
            bad.append(f"gradient norm on replica(s) {replicas}")
    return " and ".join(bad) or None


def guard_nonfinite(step_fn: Callable, donate: bool = True) -> Callable:
    """Wrap a train step so a step with a non-finite loss or gradient changes nothing but
    the step counter. The flag is replicated, so every replica takes the same branch."""

    def guarded(state, batch):
        new, metrics = step_fn(state, batch)
        bad = ~jnp.isfinite(metrics["loss"])
        if "grad_norm" in metrics:
            bad = bad | jnp.any(~jnp.isfinite(metrics["grad_norm"]))
        kept = jax.tree.map(lambda old, fresh: jnp.where(bad, old, fresh), state, new)
        return kept.replace(step=new.step), {**metrics, "nonfinite": bad}

    return jax.jit(guarded, donate_argnums=(0,) if donate else ())


class StopSignals:
    """Context manager: SIGTERM/SIGINT set `signum` instead of killing the loop.

    Installed only on the main thread (Python delivers signals there); handlers that were
    installed from Python are put back on exit."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, checkpointing: bool = True):
        self.signum: int | None = None
        self.checkpointing = checkpointing   # what the first signal's line promises
        self._previous: dict[int, Any] = {}

    def _handle(self, signum, frame):
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # second Ctrl-C: abort without saving
        if self.signum is None:
            self.signum = signum
            then = "and saving a checkpoint" if self.checkpointing else "(this run saves no checkpoints)"
            print(f"\njaxsel: received {signal.Signals(signum).name}; finishing the step in flight {then} "
                  f"(Ctrl-C again aborts)", file=sys.stderr, flush=True)

    def __enter__(self) -> "StopSignals":
        self.signum = early_stop.pending()   # received while the command started up: stop at once
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.getsignal(sig)
                signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, prev in self._previous.items():
            if prev is not None:  # None: a handler set outside Python (cannot be restored)
                signal.signal(sig, prev)
            else:
                signal.signal(sig, signal.SIG_DFL)
        self._previous.clear()
