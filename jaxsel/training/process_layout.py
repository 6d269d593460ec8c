"""The multi-host flags of a run, checked before any process starts (`jaxsel train
--coordinator/--num-processes/--process-id`, `--distributed auto`, the timeouts).

Free of JAX: the supervisor of a multi-host process (supervisor.py) checks them before it
starts its child, and importing JAX there would cost every process of the job a second of
start-up for nothing (the supervisor never computes).
"""
from __future__ import annotations

import math

#: the longest --peer-timeout (a day): jax takes whole seconds as a C int
MAX_PEER_TIMEOUT_S = 86400.0


def parse_address(address: str) -> tuple[str, int]:
    """'HOST:PORT' -> (host, port); ValueError naming the value otherwise."""
    host, sep, port = str(address).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--coordinator must be HOST:PORT with a port in 1..65535, got {address!r}")
    return host, int(port)


def check_process_layout(coordinator: str | None, num_processes: int | None, process_id: int | None,
                         auto: bool = False, peer_timeout: float | None = None,
                         join_timeout: float | None = None) -> None:
    """Raise ValueError for an incomplete or inconsistent process layout (before JAX starts)."""
    for flag, value in (("--peer-timeout", peer_timeout), ("--join-timeout", join_timeout)):
        if value is not None and not (math.isfinite(value) and 0 < value <= MAX_PEER_TIMEOUT_S):
            raise ValueError(f"{flag} must be a finite number of seconds in (0, {MAX_PEER_TIMEOUT_S:.0f}], "
                             f"got {value!r}")
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
