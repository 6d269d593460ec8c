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
    from ..training.early_stop import StartupSignals

    with StartupSignals() as startup:   # first: a Ctrl-C from here on is one line and exit 130
        from .command import run

        return run(argv, startup)
