"""The command line's strategy flags, help text and plugins.

Flags map onto strategy options (dataclass fields); `--opt KEY=VALUE` reaches any other.
A flag no chosen strategy takes is an error naming the valid options, never dropped.
`--plugin MODULE` imports user code that calls `jaxsel.register_strategy`,
`register_trigger` or `register_aggregator` before the options are read.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from pathlib import Path

from ..core.options import OptionError, accepts, option_defaults, parse_kv

#: flags that set a strategy option of the same name
FLAGS = {"period": int, "delta": float, "window": int, "alpha": float, "aggregator": str}


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Every flag's default in its help line; the epilog's strategy list kept as written."""


def add_strategy_args(p: argparse.ArgumentParser) -> None:
    from ..strategies import STRATEGIES

    def takers(option):
        return ", ".join(n for n, cls in STRATEGIES.items() if accepts(cls, option)) or "none"

    s = p.add_argument_group("strategy options (a flag no chosen strategy takes is an error; "
                             "defaults: each strategy's own, listed below)")
    s.add_argument("--period", type=int, default=None, help=f"sync period in steps ({takers('period')})")
    s.add_argument("--delta", type=float, default=None, help=f"significance threshold ({takers('delta')})")
    s.add_argument("--window", type=int, default=None, help=f"EWMA window ({takers('window')})")
    s.add_argument("--alpha", type=float, default=None, help=f"EWMA smoothing ({takers('alpha')})")
    s.add_argument("--aggregator", default=None,
                   help="mean, weighted, median, min, max, trimmed:K, random, or a registered one")
    s.add_argument("--opt", action="append", metavar="KEY=VALUE",
                   help="any other strategy option; trigger.FIELD=VALUE for the 'triggered' strategy, "
                        "inner.FIELD=VALUE / outer.FIELD=VALUE for the levels of 'hierarchical'")
    s.add_argument("--plugin", action="append", metavar="MODULE",
                   help="import MODULE (a name or a .py file) that registers strategies, triggers or aggregators")


def strategy_epilog() -> str:
    """Each strategy's options with their defaults, for `--help`."""
    from ..strategies import STRATEGIES

    lines = ["strategies and their options (defaults):"]
    width = max(map(len, STRATEGIES))
    for name, cls in STRATEGIES.items():
        opts = ", ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}"
                         for k, v in option_defaults(cls).items() if not k.endswith("_options"))
        lines.append(f"  {name:<{width}}  {opts or '(no options)'}")
    lines.append("compress (payload codecs): none, bf16, int8, topk:F (the ceil(F*size) largest entries, "
                 "0 < F <= 1), sign (1 bit per entry and a scale); topk and sign keep what they did not "
                 "send as a residual for the next sync unless error_feedback=False")
    return "\n".join(lines)


def options_from_args(args) -> dict:
    """The strategy options the user set (flags and --opt), unfiltered."""
    flags = {k: v for k in FLAGS if (v := getattr(args, k, None)) is not None}
    opts = parse_kv(getattr(args, "opt", None))
    both = sorted(set(flags) & set(opts))
    if both:
        key = both[0]
        raise OptionError(f"--{key} {flags[key]} and --opt {key}={opts[key]} both set {key}; give it once")
    return {**flags, **opts}


def load_plugins(argv: list[str]) -> None:
    """Import every `--plugin MODULE` of `argv` (before the parser lists the strategies)."""
    for i, arg in enumerate(argv):
        if arg == "--plugin" and i + 1 < len(argv):
            _import(argv[i + 1])
        elif arg.startswith("--plugin="):
            _import(arg.split("=", 1)[1])


def _import(spec: str) -> None:
    """Import one plugin; whatever goes wrong in it is one line naming the plugin and the
    error's first line (the plugin's own traceback is the author's business)."""
    if not spec.strip():
        raise OptionError("--plugin needs a module name or a .py file, got ''")
    path = Path(spec)
    if spec.endswith(".py") and not path.is_file():
        raise OptionError(f"--plugin {spec!r}: no such file")
    try:
        if spec.endswith(".py"):
            module_spec = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[path.stem] = module
            module_spec.loader.exec_module(module)
        else:
            importlib.import_module(spec)
    except ImportError as err:
        raise OptionError(f"--plugin {spec!r} could not be imported ({err})") from None
    except Exception as err:  # noqa: BLE001 - a plugin may raise anything while it loads
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise OptionError(f"--plugin {spec!r} failed while loading: {type(err).__name__}"
                          + (f": {first}" if first else "")) from None
