"""The `jaxsel` command (`python -m jaxsel.cli`): argument parsing and the subcommands.

The top layer. Importing this package imports no JAX: the command installs its Ctrl-C
handler first (`jaxsel.training.early_stop`).
"""
