"""Issue 44 item 4: what the layers above know of a method (the frontier's `budget`, the cost
model's `background`, the run's `unsynced` warning, whether its syncs are `adaptive`) is
declared beside the strategy with `@method_traits(...)`, not on the core `Strategy`; a class
inherits its bases' traits field by field, as it inherited the class attributes they were;
last release's class attributes (and `adaptive_sync()`) on a user's strategy still work for
one release, each read with a DeprecationWarning naming `method_traits`."""
import dataclasses
import io
import warnings
from typing import ClassVar

import pytest

import jaxsel
from jaxsel.cli.deprecated import renamed_option_notes
from jaxsel.core.budget import Budget, sweep
from jaxsel.costmodel import strategy_timing
from jaxsel.strategies import MethodTraits, is_adaptive, method_traits, traits_of
from jaxsel.strategies.diloco import OuterLoop
from jaxsel.strategies.traits import TraitOnClassWarning
from jaxsel.training.sync_horizon import never_syncs_warning, remedy

MOVED = ("budget", "background", "unsynced", "adaptive_sync")


def test_the_core_protocol_carries_none_of_them():
    owns = lambda cls, name: any(name in vars(klass) for klass in cls.__mro__)
    assert not [name for name in MOVED if owns(jaxsel.Strategy, name)]
    assert not [name for cls in jaxsel.strategies.STRATEGIES.values() for name in MOVED if owns(cls, name)]
    assert traits_of(jaxsel.Strategy) == MethodTraits()   # the defaults: declares nothing


def test_last_release_s_reads_of_them_still_answer_with_a_warning_naming_where_to_read():
    """`LocalSGD.budget`, `strategy.background`, `strategy.adaptive_sync()`: last release's
    reads answer what the traits say, each with a DeprecationWarning naming `traits_of`; a
    name that never was one is still an AttributeError."""
    localsgd, selsync = jaxsel.strategies.STRATEGIES["localsgd"], jaxsel.SelSync(window=2, delta=0.1)
    ssp = jaxsel.strategies.STRATEGIES["ssp"]()
    with pytest.warns(DeprecationWarning, match=r"budget .*traits_of\(strategy\)\.budget"):
        assert localsgd.budget == traits_of(localsgd).budget is not None
    with pytest.warns(DeprecationWarning, match="traits_of"):
        assert ssp.background == traits_of(ssp).background and selsync.unsynced == traits_of(selsync).unsynced
    with pytest.warns(DeprecationWarning, match=r"is_adaptive\(strategy\)"):
        assert selsync.adaptive_sync() is True and type(selsync).adaptive_sync(selsync) is True
    with pytest.warns(DeprecationWarning):
        assert jaxsel.strategies.STRATEGIES["bsp"]().adaptive_sync() is False
    with pytest.raises(AttributeError, match="'SelSync' object has no attribute 'budgets'"):
        selsync.budgets
    with pytest.raises(AttributeError, match="LocalSGD has no attribute 'budgets'"):
        localsgd.budgets
    assert not hasattr(selsync, "budgets") and getattr(selsync, "budgets", 3) == 3


def test_a_subclass_inherits_its_bases_traits_field_by_field():
    @method_traits(unsynced="its own averaging never happens")
    @dataclasses.dataclass(frozen=True)
    class Mine(jaxsel.LocalSGD):
        name: ClassVar[str] = "mine"

    @dataclasses.dataclass(frozen=True)
    class Below(Mine):
        pass

    for cls in (Mine, Below):   # budget and adaptive from LocalSGD, unsynced from Mine
        assert traits_of(cls) == dataclasses.replace(traits_of(jaxsel.LocalSGD), unsynced="its own averaging never happens")
    assert traits_of(jaxsel.DiLoCo).unsynced == traits_of(OuterLoop).unsynced != MethodTraits().unsynced   # a mixin's
    assert traits_of(jaxsel.SSDSGD).background == "overlapped" and traits_of(jaxsel.SSP).background == "async"
    assert is_adaptive(Below(period=None, syncs=None, total_steps=10)) is False
    assert is_adaptive(jaxsel.Hierarchical(groups=2)) and not is_adaptive(jaxsel.Hierarchical(inner=jaxsel.BSP(), groups=2,
                                                                                            outer=jaxsel.LocalSGD(period=4)))


def test_a_trait_that_is_not_one_or_a_budget_that_is_not_one_is_a_one_line_error():
    with pytest.raises(TypeError, match="unknown trait.s. budgets; the traits are budget, background, unsynced, adaptive"):
        method_traits(budgets=sweep("period", 2))
    with pytest.raises(TypeError, match=r"budget must be a core.budget.Budget .* got \{'period': 2\}"):
        method_traits(budget={"period": 2})


@dataclasses.dataclass(frozen=True)
class LastRelease(jaxsel.LocalSGD):
    """A user's strategy written for the last release: its traits on the class."""

    name: ClassVar[str] = "last_release"
    budget: ClassVar[Budget] = sweep("period", 3, 5)
    background: ClassVar[str] = "overlapped"
    unsynced: ClassVar[str] = "its own averaging never happens"

    def adaptive_sync(self) -> bool:
        return self.period == 7


@method_traits(background="async")
@dataclasses.dataclass(frozen=True)
class Updated(LastRelease):
    """A subclass that moved one trait: that one is read silently, the rest still warn."""


def test_last_release_s_class_attributes_still_work_with_a_warning_naming_the_replacement():
    with pytest.warns(TraitOnClassWarning) as record:
        got = traits_of(LastRelease)
        timing = strategy_timing(LastRelease(period=4))
        line = never_syncs_warning(LastRelease(period=1000), 10)
        how = remedy(LastRelease(period=1000))
        adaptive = (is_adaptive(LastRelease(period=7)), is_adaptive(LastRelease(period=4)))
    assert got.budget == sweep("period", 3, 5) and got.background == "overlapped" and timing.background == "overlapped"
    assert line.endswith("so its own averaging never happens; lower its period (last_release:period=... in its entry, "
                         "or --opt period=...) or raise --steps") and "period" in how
    assert adaptive == (True, False)
    messages = {str(w.message) for w in record}
    assert all(issubclass(w.category, DeprecationWarning) for w in record)
    assert ("LastRelease.background: declaring a strategy's background on its class is deprecated and read for one "
            "release; declare it beside the class with @jaxsel.method_traits(background=...)") in messages
    assert any("LastRelease.adaptive_sync" in m and "method_traits(adaptive=lambda strategy: ...)" in m for m in messages)
    with pytest.warns(TraitOnClassWarning) as record:
        assert traits_of(Updated).background == "async" and traits_of(Updated).budget == sweep("period", 3, 5)
    assert not any("background" in str(w.message) for w in record)


def test_an_option_named_like_a_trait_is_an_option_and_the_command_line_notes_a_moved_one_once():
    @dataclasses.dataclass(frozen=True)
    class WithOption(jaxsel.LocalSGD):
        background: str = "mine"   # an option of the method, not last release's trait

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert traits_of(WithOption).background == "async"
    err = io.StringIO()
    with renamed_option_notes(err):
        traits_of(LastRelease), traits_of(LastRelease)
    lines = err.getvalue().splitlines()
    assert len(lines) == 4 and all(line.startswith("jaxsel: note: LastRelease.") for line in lines), lines
