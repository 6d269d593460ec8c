"""Before a multi-host job starts JAX's coordination service, every process checks in with
process 0 at the coordinator address, so a process that never starts, or two processes
given the same --process-id, are named in one line within --join-timeout.

Why: jax.distributed waits for the missing process and then aborts the ones that came from
C++ (a fatal log, SIGABRT), which reads as "a peer died". Here process 0 listens on the
coordinator's port for `--join-timeout` seconds; each other process connects and says
which process it is; process 0 answers everyone "go" once all have joined, or the same
one-line error (`JoinError`, exit code 2): a process that never joined, a process id given
twice, a different --num-processes. Then process 0 closes the port and JAX's service takes
it (the peers close their ends first, so the port is free at once).
"""
from __future__ import annotations

import os
import socket
import time

HELLO = "jaxsel-join"


class JoinError(ValueError):
    """The processes of a multi-host job could not all join (one line, exit code 2)."""


def join(coordinator: str, num_processes: int, process_id: int, timeout_s: float) -> None:
    """Wait until every process of the job has checked in with process 0, or raise JoinError."""
    host, _, port = coordinator.rpartition(":")
    deadline = time.monotonic() + timeout_s
    if process_id == 0:
        _lead(host, int(port), num_processes, deadline, f"{coordinator} within {timeout_s:g} s")
    else:
        _follow(host, int(port), num_processes, process_id, deadline, coordinator, timeout_s)


def _lead(host: str, port: int, n: int, deadline: float, where: str) -> None:
    try:
        server = socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True) \
            if socket.has_dualstack_ipv6() else socket.create_server(("", port))
    except OSError as err:
        why = os.strerror(err.errno) if err.errno else str(err)
        raise JoinError(f"process 0 cannot listen on port {port} ({why}): another process 0 of this job is there "
                        f"(--process-id 0 given twice?), or another program; choose a free --coordinator "
                        f"port") from None
    joined: dict[int, socket.socket] = {}
    callers: list[socket.socket] = []   # everyone who checked in, answered alike
    try:
        problem = _gather(server, n, joined, callers, deadline, where)
        for conn in callers:
            _send(conn, f"error {problem}" if problem else "go")
        if problem:
            raise JoinError(problem)
        for conn in callers:   # the peers close first: no TIME_WAIT on the coordinator's port
            conn.settimeout(5.0)
            try:
                conn.recv(1)
            except OSError:
                pass
    finally:
        for conn in callers:
            conn.close()
        server.close()


def _gather(server: socket.socket, n: int, joined: dict, callers: list, deadline: float, where: str) -> str | None:
    """Accept the other processes' check-ins; the problem, if any, as a sentence."""
    while len(joined) < n - 1:
        server.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            conn, address = server.accept()
        except socket.timeout:
            missing = [str(p) for p in range(1, n) if p not in joined]
            return (f"process{'es' if len(missing) > 1 else ''} {', '.join(missing)} of {n} never joined "
                    f"{where}; start every process (or raise --join-timeout)")
        conn.settimeout(max(deadline - time.monotonic(), 1.0))
        try:
            tag, their_n, pid = _receive(conn).split()
            their_n, pid = int(their_n), int(pid)
        except (OSError, ValueError):
            conn.close()   # not one of ours (a port scanner, a stray client): ignore it
            continue
        if tag != HELLO:
            conn.close()
            continue
        callers.append(conn)
        if their_n != n:
            return f"process {pid} was started with --num-processes {their_n}, process 0 with {n}"
        if pid in joined:
            return (f"process id {pid} was given to two processes (--process-id {pid} twice; the second joined "
                    f"from {address[0]}); give each process its own id 0..{n - 1}")
        joined[pid] = conn
    return None


def _follow(host: str, port: int, n: int, pid: int, deadline: float, coordinator: str, timeout_s: float) -> None:
    conn = None
    while conn is None:
        try:
            conn = socket.create_connection((host, port), timeout=max(deadline - time.monotonic(), 0.001))
        except OSError:
            if time.monotonic() >= deadline:
                raise JoinError(f"process 0 of {n} never came up at {coordinator} within {timeout_s:g} s (this is "
                                f"process {pid}); start process 0 (or raise --join-timeout)") from None
            time.sleep(0.2)
    try:
        conn.settimeout(max(deadline - time.monotonic(), 1.0) + 5.0)   # process 0 answers by its deadline
        _send(conn, f"{HELLO} {n} {pid}")
        answer = _receive(conn)
    except OSError:
        answer = ""
    finally:
        conn.close()
    if answer == "go":
        return
    if answer.startswith("error "):
        raise JoinError(answer[len("error "):])
    raise JoinError(f"process 0 at {coordinator} did not answer the check-in of process {pid}: a job is already "
                    f"running there (--process-id {pid} given twice?), or the port is another program's")


def _send(conn: socket.socket, text: str) -> None:
    try:
        conn.sendall(text.encode() + b"\n")
    except OSError:
        pass   # a peer that left: it learns nothing more from us


def _receive(conn: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace").strip()
