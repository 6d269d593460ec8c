"""The `jaxsel` command (`jaxsel.cli:main`, `python -m jaxsel.cli`): parsing and subcommands.

The top layer. Importing it imports nothing: `main` installs the start-up Ctrl-C handler
(`jaxsel.training.early_stop`) before anything else is imported, so that a Ctrl-C during
the command's own imports is one line and exit 130 rather than a traceback; every
subcommand imports what it needs when it runs.
"""
from __future__ import annotations

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run the `jaxsel` command line (`argv` defaults to `sys.argv[1:]`); return its exit code."""
    try:
        from ..training.early_stop import StartupSignals
    except KeyboardInterrupt:   # a Ctrl-C in the milliseconds before its handler exists (a busy box)
        return _stopped_before_the_handler(argv)

    with StartupSignals() as startup:   # first: a Ctrl-C from here on is one line and exit 130
        from .command import run

        return run(argv, startup)


def _stopped_before_the_handler(argv: list[str] | None) -> int:
    """The start-up stop's one line (`early_stop.StoppedEarly`'s words and the command to run
    again), exit 130: the same as a Ctrl-C a moment later, never a traceback."""
    import sys

    from .next_command import again

    print("jaxsel: received SIGINT while starting up; stopped before training, nothing written; run it again: "
          f"{again(sys.argv[1:] if argv is None else argv)}", file=sys.stderr)
    return 130
