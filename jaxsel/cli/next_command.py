"""A stopped command's line ends with the command to type next.

"stopped after step 0, no checkpoint saved" and "jaxsel compare: interrupted" left a user
to work out what now. Each stop (a signal before training, during a run, in a job's cell,
or a second Ctrl-C) is one line ending with the command line that continues it: the same
arguments, with `--out RUN_DIR --resume` where the run left a directory to resume (a run
without a checkpoint resumes from step 0), or the same arguments again where nothing was
written.
"""
from __future__ import annotations

import shlex


def again(argv: list[str]) -> str:
    """The command line as typed."""
    return "jaxsel " + shlex.join(argv)


def resumed(argv: list[str], out: str | None) -> str:
    """The command line that continues the run in `out`: `--out out` unless typed, and `--resume`."""
    typed_out = any(a == "--out" or a.startswith("--out=") for a in argv)
    tokens = [a for a in argv if a != "--resume"]
    if out is not None and not typed_out:
        tokens += ["--out", str(out)]
    return again([*tokens, "--resume"])


def stop_line(stop: BaseException, args, argv: list[str]) -> str:
    """What follows `jaxsel COMMAND: ` when `stop` ended the command: its own line (or
    "interrupted", a second Ctrl-C), then the next command."""
    out = getattr(args, "run_dir", None)   # the directory the command made (None: none yet)
    said = getattr(stop, "what", None) or str(stop) or "interrupted"
    if out is None or getattr(args, "no_checkpoint", False):
        return f"{said}; run it again: {again(argv)}"
    return f"{said}; continue with: {resumed(argv, out)}"
