"""The `jaxsel` command: its parser, its dispatch and how errors end it.

One module per command under cli/ (train, compare, frontier, calibrate, strategies, report,
bench, datasets and prepare), each with `add_parser(sub)` and its `cmd_*`; what they share is in
common.py, job_args.py (--out, --resume, --config, --seeds), task_args.py (TrainConfig's
flags in sections) and strategy_args.py. Building the parser imports no JAX, so `--help`
is immediate. Bad input exits with code 2 and one line naming the value and what is
allowed; a last-release flag still works with one line naming its replacement.
"""
from __future__ import annotations

import argparse
import errno
import sys

from .common import UsageError
from .next_command import stop_line


#: errors about the user's input found while running: one line, exit code 2 ("module:Class")
USER_ERRORS = ("data.formats:FormatError", "data.paths:UnusablePath", "data.prepare:CannotPrepare",
               "data.sources:DatasetNotPrepared", "training.checkpoint:CheckpointError",
               "training.checkpoint:CheckpointMismatch", "training.declare:ConfigError",
               "training.distributed:SettingsMismatch", "training.rundir.lock:RunLocked",
               "cli.backend:JaxEnvironmentError")
#: training faults reported as one line with exit code 1: NaN/inf, a lost peer, and an
#: installed JAX, Flax or Orbax that lost something jaxsel relies on
RUN_FAULTS = ("training.faults:NonFiniteError", "training.distributed:PeerLostError",
              "core.library_changes:LibraryChanged")
#: a run stopped by SIGTERM (exit 143) or SIGINT (130) after saving
INTERRUPTED = ("training.faults:TrainingInterrupted",)


def loaded_classes(names: tuple[str, ...]) -> tuple[type, ...]:
    """The classes named "module:Class" (under jaxsel) whose modules this process imported.

    Why not import them all: an exception of a class whose module was never imported cannot
    have been raised, and importing them to tell would import Orbax and TFDS (about a second)
    on the way out of every usage error, and of a multi-host job's supervisor."""
    out = []
    for name in names:
        module, _, cls = name.partition(":")
        loaded = sys.modules.get(f"jaxsel.{module}")
        if loaded is not None and isinstance(getattr(loaded, cls, None), type):
            out.append(getattr(loaded, cls))
    return tuple(out)


def _user_errors() -> tuple[type, ...]:
    return (UsageError, *loaded_classes(USER_ERRORS))


#: file-system failures a user can fix (disk full, quota, read-only, permissions, a symbolic
#: link where jaxsel writes a file: rundir/links.py)
FS_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR,
                       errno.EISDIR, errno.ENAMETOOLONG, errno.ELOOP})
REPORT_BUGS = "this is a bug in jaxsel; please report it with the command line and the traceback above"


def _run_faults() -> tuple[type, ...]:
    return loaded_classes(RUN_FAULTS)


def _interrupted() -> tuple[type, ...]:
    return loaded_classes(INTERRUPTED)


#: what `jaxsel --help` opens with: what the command does (not this module's docstring)
DESCRIPTION = ("Semi-synchronous data-parallel training on JAX: train one strategy (SelSync, BSP, local SGD, "
               "DiLoCo, ...), compare several side by side on one task, sweep each over its budget, and list "
               "the strategies and datasets. `jaxsel COMMAND --help` gives a command's flags; `jaxsel compare` "
               "is the default job.")

#: the commands that build training steps (and read their environment: $JAXSEL_PACKING_MEASURE)
TRAINING_COMMANDS = ("train", "compare", "frontier", "bench")


def build_parser() -> argparse.ArgumentParser:
    from . import bench, calibrate, compare, datasets, frontier, report, strategies, train
    from .common import HelpFormatter

    parser = argparse.ArgumentParser(prog="jaxsel", description=DESCRIPTION, formatter_class=HelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")   # a short usage line
    compare.add_parser(sub)
    frontier.add_parser(sub)
    calibrate.add_parser(sub)
    train.add_parser(sub)
    strategies.add_parser(sub)
    datasets.add_parsers(sub)
    bench.add_parser(sub)
    report.add_parser(sub)
    from .once import refuse_repeats

    return refuse_repeats(parser)   # an option given twice is an error, not its last value


def run(argv: list[str] | None, startup) -> int:
    """The command line under the start-up signal handler `startup` (installed by `jaxsel.cli.main`)."""
    from ..training.early_stop import StoppedEarly, check

    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        from .backend import check_cpu_device_count

        check_cpu_device_count()   # JAX reads it when first imported (by the plugins' strategies)
        from .strategy_args import load_plugins

        load_plugins(argv)   # registered names must be known before the parser lists them
        parser = build_parser()
        from .typos import parse

        args = parse(parser, argv)   # a mistyped flag: its subcommand's usage and the closest flag
        if args.command != "train":
            startup.release()   # other commands leave Ctrl-C to Python (KeyboardInterrupt)
        if args.command in TRAINING_COMMANDS:
            from ..core.packing_setting import measure_setting

            measure_setting()   # read only once a run has started: a bad value is one line now
        from .deprecated import notes

        for line in notes(args, argv):   # a last-release flag: it works, and its replacement is named
            print(line, file=sys.stderr, flush=True)
        check()
    except ValueError as err:
        print(f"jaxsel: error: {one_line(err)}", file=sys.stderr)
        return 2
    except StoppedEarly as stop:
        print(f"jaxsel: {stop_line(stop, None, argv)}", file=sys.stderr)
        return stop.exit_code
    except KeyboardInterrupt as stop:   # a second Ctrl-C
        print(f"jaxsel: {stop_line(stop, None, argv)}", file=sys.stderr)
        return 130
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        from .deprecated import renamed_option_notes

        with renamed_option_notes():   # a strategy option by its last release's name: one note each
            return _command(args, argv)
    except _user_errors() as err:
        print(f"jaxsel {args.command}: error: {one_line(err)}", file=sys.stderr)
        return 2
    except (*_interrupted(), StoppedEarly) as stop:  # SIGTERM -> 143, SIGINT -> 130 (after saving)
        print(f"jaxsel {args.command}: {stop_line(stop, args, argv)}", file=sys.stderr)
        return stop.exit_code
    except _run_faults() as err:  # NaN/inf, unreadable checkpoints, a lost peer: one line, exit 1
        print(f"jaxsel {args.command}: error: {one_line(err)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as stop:   # a second Ctrl-C: no saving, what is kept is kept
        print(f"jaxsel {args.command}: {stop_line(stop, args, argv)}", file=sys.stderr)
        return 130
    except OSError as err:
        if err.errno not in FS_ERRNOS:
            return _unexpected(args.command)
        where = f": {err.filename}" if err.filename else ""
        print(f"jaxsel {args.command}: error: {err.strerror or err}{where}", file=sys.stderr)
        return 2
    except Exception:  # noqa: BLE001 - a bug: its traceback once, and where to send it
        return _unexpected(args.command)


def _command(args, argv: list[str]) -> int:
    """The parsed command: its config file, the resumed run's record and the task applied,
    then its function (a multi-host train under its supervisor)."""
    from .settings_args import settings_from_argv

    settings_from_argv(args, argv, build_parser)
    if args.command == "train":
        from . import train

        if train.multihost(args):
            from ..training.supervisor import available

            if available():
                return train.supervised(args, argv)
    return int(args.func(args) or 0)


def one_line(err: BaseException) -> str:
    """An error's message on one line: some carry a library's multi-line detail (a tarball
    that is not one lists every compression tried)."""
    return "; ".join(line.strip() for line in str(err).splitlines() if line.strip())


def _unexpected(command: str) -> int:
    import traceback

    traceback.print_exc()
    print(f"jaxsel {command}: error: {REPORT_BUGS}", file=sys.stderr, flush=True)
    return 1

