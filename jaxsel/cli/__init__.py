"""The `jaxsel` command (`jaxsel.cli:main`, `python -m jaxsel.cli`): parsing and subcommands.

The top layer. Importing it imports no JAX: the command installs its Ctrl-C handler first
(`jaxsel.training.early_stop`), and every subcommand imports what it needs when it runs.
"""
from .command import main

__all__ = ["main"]
