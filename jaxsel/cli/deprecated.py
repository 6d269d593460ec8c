"""Last release's flags, read for one more release with a one-line note naming the new form.

Until this release every strategy option was a top-level flag of train, compare and
frontier (`--delta 0.2`, `--period 8`): 50 flags, where `--alpha` meant SelSync's
smoothing and Streaming DiLoCo's mixing weight at once. A strategy's options now go in its
entry (`--strategy selsync:delta=0.2`, `--strategies bsp,localsgd:period=8`) or in `--opt
KEY=VALUE`; the old flags still work exactly as `--opt` does, hidden from `--help`, and
each use prints one line on stderr. So do the projection's flags, now the keys of
`--project` (`--project-network 25gbe` is `--project network=25gbe`; training/config.py
declares those old names with their fields). The next release removes both. A removed
value (`--packing matmul`) runs as its replacement, noted the same way. A strategy
option renamed since (DiLoCo's `inner_steps`, now `period`: a strategy's `aliases`) is
read wherever it is written (entry, `--opt`, config file, an old flag) and warned where it
is read (`compat.renamed_options`); `renamed_option_notes` prints each such warning
once, as a note.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import warnings

from ..core.choices import REMOVED_LOOPS
from ..core.pairs import parse_value
from ..training.config import TrainConfig
from ..training.declare import flags_of

#: the strategy options that were flags (`--NAME` with dashes), as the last release had them
OLD_STRATEGY_FLAGS = (
    "interval", "eta", "low", "high", "aggregator", "sync_model_state", "compress", "error_feedback", "lr_scale",
    "beta", "chunk", "topk", "average_over", "inner_steps", "opt_state_period", "outer_optimizer", "outer_lr",
    "outer_momentum", "period", "syncs", "total_steps", "fraction", "inner", "outer", "groups", "switch_step",
    "delta", "window", "alpha", "aggregate", "max_local", "k", "warmup_steps", "local_lr_scale", "glu_beta",
    "steps_per_epoch", "staleness", "fragments", "fragment_by", "epochs", "policy", "bsp_fraction",
    "momentum_scale", "straggler_factor", "straggler_steps", "step_times", "stragglers", "trigger", "sync",
    "sync_opt_state")
PREFIX = "old_strategy."
#: flags whose removed values are still read for one release: old value -> what it runs as
REMOVED_VALUES = {"--packing": REMOVED_LOOPS, "--local-replicas": REMOVED_LOOPS}


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_old_strategy_flags(group) -> None:
    """The old strategy flags, hidden (dest `old_strategy.NAME`)."""
    for name in OLD_STRATEGY_FLAGS:
        group.add_argument(flag(name), dest=PREFIX + name, default=None, help=argparse.SUPPRESS)


def old_strategy_options(args: argparse.Namespace) -> dict:
    """The strategy options the old flags set, read as `--opt` reads its values."""
    return {k[len(PREFIX):]: parse_value(v) for k, v in vars(args).items() if k.startswith(PREFIX) and v is not None}


def notes(args: argparse.Namespace, argv: list[str]) -> list[str]:
    """One line per old flag in `args` (spelt as in `argv`), naming its replacement."""
    lines = []
    if args.command == "train":
        entry = f"--strategy {(args.strategy or 'NAME').split(':')[0]}"
    else:
        entry = "--strategies NAME"
    old = old_strategy_options(args)
    renamed = _renamed_options() if old else {}
    for name, value in sorted(old.items(), key=lambda kv: _position(flag(kv[0]), argv)):
        new = renamed.get(name, name)   # an option renamed since: its new name
        lines.append(f"jaxsel: note: {flag(name)} is deprecated and goes in the next release; write the option in "
                     f"the strategy's entry ({entry}:{new}={value}) or as --opt {new}={value}")
    for name, decl in flags_of(TrainConfig, args.command).items():
        value = getattr(args, f"old.{name}", None)
        if value is not None:
            new = " ".join(decl.key_in) if decl.key_in else decl.names[0]
            typed = [old for old in decl.old if any(a == old or a.startswith(old + "=") for a in argv)]
            lines.append(f"jaxsel: note: {' / '.join(typed or decl.old)} is deprecated and goes in the next "
                         f"release; write {new}={value}")
    return lines + removed_values(argv)


def _renamed_options() -> dict[str, str]:
    """Every registered strategy's renamed options, old name -> new (`Strategy.aliases`)."""
    from ..strategies import STRATEGIES

    return {old: new for cls in STRATEGIES.values() for old, new in cls.aliases.items()}


@contextlib.contextmanager
def renamed_option_notes(stream=None):
    """While a command runs, each `NotedDeprecation` (a RenamedOptionWarning: a strategy
    option given by its old name, from the command line, a config file or an experiment; a
    TraitOnClassWarning: a plugin's strategy declaring a trait on its class, as last release
    did) is printed once as a one-line note on stderr instead of a warning; other warnings
    are shown as before."""
    from ..compat.notes import NotedDeprecation

    seen: set[str] = set()
    with warnings.catch_warnings():
        warnings.simplefilter("always", NotedDeprecation)
        shown = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            if not issubclass(category, NotedDeprecation):
                return shown(message, category, filename, lineno, file, line)
            if str(message) not in seen:
                seen.add(str(message))
                print(f"jaxsel: note: {message}", file=stream or sys.stderr, flush=True)

        warnings.showwarning = show
        yield


def removed_values(argv: list[str]) -> list[str]:
    """One line per removed value typed (`REMOVED_VALUES`), naming what it runs as."""
    lines = []
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if not eq:
            value = argv[i + 1] if i + 1 < len(argv) else None
        new = REMOVED_VALUES.get(name, {}).get(value)
        if new is not None:
            lines.append(f"jaxsel: note: {name} {value} was removed (it was never faster than unroll) and runs as "
                         f"{name} {new} for one more release; write {name} {new}, or unroll")
    return lines


def _position(spelt: str, argv: list[str]) -> int:
    """Where a flag stands in the command line (notes come in the order typed)."""
    return next((i for i, a in enumerate(argv) if a == spelt or a.startswith(spelt + "=")), len(argv))
