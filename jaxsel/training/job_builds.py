"""One build of each strategy and layout per long job: `one_job()` and `built_once(key, build)`.

Why: a comparison, a frontier or a calibration asks about its cells long before and after
they train: its entries are checked (`analysis/compare.check_variants`), a frontier's
points are fitted and derived, its rows are labelled and ordered, its adaptive points are
told apart, and its command line says the layout. Each of those questions used to build the
cell's strategy (or layout) again, outside the plan and each in its own way. Now only the
plan builds them (plan.py: `strategy_of`, `layout_of`, and every cell's `plan_run`), and
within one job each is built once for the settings it is built from: a strategy is a frozen
dataclass and a layout is immutable, so handing the same one to every asker changes
nothing but the number of builds. Outside a job (one `jaxsel train`, a library call) every
ask builds, as before.

This module imports nothing (no JAX): the command line's jobs enter `one_job()` before
they start JAX.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Callable, Iterator

#: the current job's builds, by what each was built from (None: no job, build every time)
_BUILT: contextvars.ContextVar[dict | None] = contextvars.ContextVar("jaxsel_job_builds", default=None)


@contextlib.contextmanager
def one_job() -> Iterator[None]:
    """Within the block (also usable as a decorator) each strategy and layout is built once;
    a block inside another shares the outer one's builds."""
    if _BUILT.get() is not None:
        yield
        return
    token = _BUILT.set({})
    try:
        yield
    finally:
        _BUILT.reset(token)


def built_once(key: tuple, build: Callable[[], Any]) -> Any:
    """`build()`, or, inside a job, what it returned for `key` the first time (a failed build
    is not kept: it fails again, with the same error)."""
    built = _BUILT.get()
    if built is None:
        return build()
    if key not in built:
        built[key] = build()
    return built[key]
