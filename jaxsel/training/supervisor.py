"""Run one process of a multi-host job in a child process and report how it ended.

Why: when a peer dies in the middle of a collective, the gloo runtime may abort this
process from one of its own threads (`std::terminate`, SIGABRT) before the heartbeat
watchdog (distributed.py) notices. No Python code runs then, and gloo's last words
("Is there a distributed collective mismatch in your code?") point the wrong way. The
supervisor outlives such an abort and says what it means, at once, with exit code 1 (JAX's
coordination client, too, aborts a process whose coordinator died).

It does no work per step: it forwards SIGTERM/SIGINT to the child (which saves and
stops), passes the child's exit code through, and takes the child down with it if it is
killed itself (Linux `PR_SET_PDEATHSIG`). It never initialises JAX's backends.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys

ENV = "JAXSEL_SUPERVISED"   # set in the child: it must not supervise itself
EXIT_PEER_LOST = 1
FORWARDED = (signal.SIGTERM, signal.SIGINT)
_PR_SET_PDEATHSIG = 1


def available() -> bool:
    """Supervision needs Linux (the child must die with its supervisor) and not to be inside one."""
    return sys.platform.startswith("linux") and os.environ.get(ENV) != "1"


def _die_with(parent: int):
    def preexec() -> None:   # runs in the child between fork and exec
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:   # the supervisor died before prctl took effect
            os._exit(EXIT_PEER_LOST)
    return preexec


def supervise(command: list[str], who: str, prog: str = "jaxsel train") -> int:
    """Run `command` as a child and return the exit code this process should end with.

    `who` names this process in messages ("process 0 of 2"). The child runs in its own
    process group, so a Ctrl-C at the terminal reaches it once, through us. The forwarding
    is in place before the child starts: a SIGTERM that arrives while it starts (a job
    stopped at once, a loaded host) is held and sent on, where it used to kill this
    process with the child unsaved (exit -15)."""
    forwarded: set[int] = set()
    held: list[int] = []   # arrived before the child existed
    children: list[subprocess.Popen] = []

    def forward(signum, frame):
        forwarded.add(signum)
        if children:
            children[0].send_signal(signum)   # a no-op once the child has been reaped
        else:
            held.append(signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    try:
        children.append(subprocess.Popen(command, env={**os.environ, ENV: "1"},
                                         preexec_fn=_die_with(os.getpid()), process_group=0))
        for signum in held:   # from here on `forward` sends itself
            children[0].send_signal(signum)
        code = children[0].wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
    if code >= 0:
        return code
    sig = signal.Signals(-code)
    if sig in forwarded:
        return 128 + sig.value
    if sig == signal.SIGABRT:
        what = ("was aborted (SIGABRT), most often by the collectives runtime or JAX's "
                "coordination client after a peer process died")
    else:
        what = f"was killed by {sig.name}" + (" (the out-of-memory killer sends it)" if sig == signal.SIGKILL else "")
    print(f"{prog}: error: {who}: the training process {what}; check the other processes' logs, "
          f"then restart every process with --resume", file=sys.stderr, flush=True)
    return EXIT_PEER_LOST
