"""What every `jaxsel` command shares: usage errors, the help layout, paths the user
gives, the run directory's default name, and JAX's start.

Importing this imports neither JAX nor anything of jaxsel's below the command line: a
command's parser is built, and `--help` printed, before anything heavy is loaded.
"""
from __future__ import annotations

import argparse
import shutil
import textwrap
import time
from contextlib import contextmanager
from pathlib import Path


class UsageError(ValueError):
    """Bad user input: reported as one line, exit code 2."""


@contextmanager
def user_input():
    """A ValueError raised while checking what the user asked for is a usage error (exit 2);
    elsewhere a ValueError is a bug and keeps its traceback."""
    try:
        yield
    except UsageError:
        raise
    except ValueError as err:
        raise UsageError(str(err)) from None


def terminal_width() -> int:
    """The columns a command's text is wrapped to: the terminal's, kept within 80-120 (a
    line past 120 is hard to read, and a pipe or a narrow pane reports odd widths)."""
    return max(80, min(120, shutil.get_terminal_size((100, 24)).columns))


def wrapped(text: str, indent: str = "  ") -> str:
    """`text` wrapped to the terminal, its continuation lines indented by `indent`."""
    return textwrap.fill(text, terminal_width(), subsequent_indent=indent, break_on_hyphens=False)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Every flag's default in its help line, unless its help says it in words ("(default
    all)") or there is none to say (unset, or a switch that is off unless given);
    descriptions and section titles wrapped paragraph by paragraph to the terminal (80-120 columns), their
    blank lines and indented lines (examples) kept as written."""

    def __init__(self, prog, **kwargs):
        super().__init__(prog, width=kwargs.pop("width", terminal_width() - 2), **kwargs)

    def start_section(self, heading):
        super().start_section(textwrap.fill(heading, self._width - 1) if heading else heading)

    def _fill_text(self, text, width, indent):
        paragraphs = text.split("\n\n")
        return "\n\n".join(par if par.startswith(" ") or "\n " in par
                             else textwrap.fill(" ".join(par.split()), width, initial_indent=indent,
                                                subsequent_indent=indent, break_on_hyphens=False)
                             for par in paragraphs)

    def _get_help_string(self, action):
        text = action.help or ""
        switch = action.nargs == 0 and not isinstance(action, argparse.BooleanOptionalAction)
        if "(default" in text or action.default is None or (switch and action.default is False):
            return text
        return super()._get_help_string(action)


def check_path_text(path: str | None, option: str) -> None:
    """A path that cannot be written as UTF-8 (bytes from a broken locale) breaks every
    log line and JSON file that names it, and one with a line break or another control
    character splits the header and the one-line errors that name it: refuse both up front."""
    if path is None:
        return
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"{option} {ascii(str(path))} is not valid UTF-8; choose a path that is") from None
    if any(ord(c) < 32 or ord(c) == 127 for c in str(path)):
        raise UsageError(f"{option} {ascii(str(path))} holds a line break or another control character; choose a "
                         f"path without") from None


def ensure_writable(path: str, option: str = "--out") -> Path | None:
    """Make `path` a writable directory, its missing parents too (as `mkdir -p`: a run's
    folder under a results/ tree not made yet); return the outermost directory this
    created, for `paths.undo_created` to remove again if the run fails before writing, or
    None when `path` existed. The run prints its directory itself: no second announcement."""
    from ..data.paths import first_missing, writable_dir

    check_path_text(path, option)
    top = first_missing(path)
    writable_dir(path, option, parents=True, quiet=True)
    return top


def default_out(prefix: str) -> str:
    """runs/<prefix>-<time>, or -2, -3, ... if taken: the name the run will claim once every
    check has passed (`rundir.claim.claim_new_dir`, atomic: two runs never get the same one)."""
    from ..training.rundir.claim import free_name

    return free_name(Path("runs") / f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}")


def request_devices(replicas: int) -> None:
    """Give a CPU-only host enough simulated devices before JAX initialises."""
    from ..core.parallel import request_cpu_devices

    request_cpu_devices(max(8, replicas))


def start_jax(replicas: int, one_cpu_device: bool = False) -> None:
    """`request_devices` (or one CPU device, for a job that packs every replica on one:
    `start_job_jax`), then JAX's backend, so a platform this machine lacks is one
    JaxEnvironmentError before anything is built."""
    from ..core.parallel import request_one_cpu_device_for_packing
    from .backend import start_backend

    if one_cpu_device:
        request_one_cpu_device_for_packing()
    else:
        request_devices(replicas)
    start_backend()


def start_job_jax(args) -> None:
    """`start_jax` for a job (compare, frontier): with one CPU device where its batches will
    pack every replica on one (analysis/job_layout.py, `packs_before_start`)."""
    from ..analysis.job_layout import packs_before_start
    from .settings_args import config_from_args

    try:
        packs = packs_before_start(config_from_args(args, strategy="bsp"), args.batch_cells)
    except Exception:   # noqa: BLE001 - bad settings: the job reports them itself, once started
        packs = False
    start_jax(args.replicas, one_cpu_device=packs)


def layout_line(cfg) -> str:
    """The true layout line of a run's config; replicas that do not fit: a usage error."""
    from ..training.plan import layout_of

    with user_input():
        return layout_of(cfg).describe()


def job_layout_line(cfg, given, batch_cells: bool) -> str:
    """A long job's layout line: the layout of `cfg`, the job's settings, what packing the
    replicas `given` spread changed (analysis/job_layout.py) and how its batches overlap
    (analysis/batch_queue.py)."""
    from ..analysis.batch_queue import together_note
    from ..analysis.job_layout import packed_note

    return layout_line(cfg) + packed_note(cfg, given) + together_note(cfg, batch_cells)


def overrides_note(command: str, overrides: dict) -> str:
    """The sentence of `command`'s help that names its defaults other than TrainConfig's."""
    from ..training.config import TrainConfig
    from ..training.declare import default_of

    shown = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in overrides.items() if v != default_of(TrainConfig, k))
    return f"`jaxsel {command}`'s own defaults (a TrainConfig's differ): {shown}."
