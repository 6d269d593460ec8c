"""The `[strategy]` section: the method and its options."""
from __future__ import annotations

import dataclasses

from ..declare import IDENTITY, option, section
from .checks import known_name


@section("strategy")
@dataclasses.dataclass(frozen=True)
class StrategySettings:
    """The method by its registered name, and its options (checked against the strategy's
    own fields where the plan builds it: the strategy, its trigger and aggregator own those
    rules)."""

    strategy: str = option("selsync", commands=("train",), metavar="NAME[:KEY=VALUE...]", effect=IDENTITY,
                           help="the method and its options, e.g. selsync:delta=0.2 (`jaxsel strategies [NAME]`)")
    strategy_options: dict = option(factory=dict, no_flag="set in the --strategy entry or by --opt KEY=VALUE, "
                                    "checked against the strategy's own fields (cli/strategy_args.py)")

    def check(self, run) -> None:
        """The strategy is registered (`run`: the whole settings, unused here)."""
        from ...strategies import STRATEGIES

        known_name("strategy", self.strategy, list(STRATEGIES))
