"""JAX's backend, checked where the user's environment chooses it.

`JAX_PLATFORMS` and `JAX_NUM_CPU_DEVICES` come from the shell, not from jaxsel's flags,
and JAX reads them only when it starts: `JAX_PLATFORMS=cuda` on a machine without CUDA, a
misspelt platform or `JAX_NUM_CPU_DEVICES=0` surfaced as a RuntimeError (or a bare
AssertionError) from deep inside JAX, then "this is a bug in jaxsel". Each is a usage
error: one line naming the variable, its value and what to do, exit code 2.
"""
from __future__ import annotations

import os



class JaxEnvironmentError(ValueError):
    """The environment asks JAX for devices this machine cannot give (one line, exit 2)."""


def check_cpu_device_count() -> None:
    """Before JAX is imported (it reads the variable then): JAX_NUM_CPU_DEVICES, when set,
    is a whole number of devices >= 1."""
    text = os.environ.get("JAX_NUM_CPU_DEVICES")
    if text is None:
        return
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise JaxEnvironmentError(f"JAX_NUM_CPU_DEVICES={text!r} must be a whole number of CPU devices >= 1; set it so, "
                         f"or unset it")


def start_backend() -> None:
    """Start JAX's backend now (after `parallel.request_cpu_devices` and jax.distributed,
    before anything is created), so a platform this machine lacks is one JaxEnvironmentError."""
    import jax

    try:
        jax.devices()
    except (RuntimeError, AssertionError) as err:   # JAX asserts when no backend at all came up
        platforms = os.environ.get("JAX_PLATFORMS")
        asked = f"JAX_PLATFORMS={platforms!r}" if platforms else "its default platform"
        why = " ".join(str(err).split()) or "no backend could be initialised"
        raise JaxEnvironmentError(f"JAX cannot start {asked} on this machine ({why}); set JAX_PLATFORMS to a "
                         f"platform it has (cpu, or its accelerator's), or unset it") from None
