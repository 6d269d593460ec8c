"""One declaration per setting: a TrainConfig field carries its own command-line flag.

`option(default, help=..., ...)` is `dataclasses.field` with a `Flag` (or a `NoFlag` and
its reason) in the field's metadata: the flag's names, help, choices and metavar, how its
text becomes the field's value, which commands take it and the section (`group`) of
`--help` and of config files it belongs to. The `train`, `compare`, `frontier` and `calibrate`
parsers (`jaxsel.cli.task_args`), config files (`config_file`) and the choice checks of
`check_config` all read these, so a default, a choice list or a spelling is written once
and `jaxsel train --help` shows the field's own default. A field may instead be one key of
a section's `KEY=VALUE` flag (`key_in`: `--project network=25gbe`), and may keep the names
it had in the last release (`old`) for one more, hidden from `--help`, each use noted.

A field also says what it does to a run (`effect`): whether another value names another
run, changes its results, only what it reports, nothing a resume need keep, or where the
run lives; and whether each process of a multi-host run may set it its own way
(`per_process`). Checkpoints, resumes and multi-host agreement read these (`with_effect`),
so a new setting declares them once, beside its flag, and no list elsewhere names it.
Each section of the settings (training/sections/) declares its fields with `@section`.
"""
from __future__ import annotations

import dataclasses
import typing
from typing import Any, Callable, NamedTuple

#: the commands whose parsers are generated from the declarations
COMMANDS = ("train", "compare", "frontier", "calibrate")
#: the sections of a run's settings, in `--help`'s order (config files: `[section]` tables)
SECTIONS = {"strategy": "strategy: the method and its options (`jaxsel strategies NAME` lists them)",
            "data": "data: the dataset, its shards over the replicas, the input pipeline",
            "optim": "model and optimizer",
            "replicas": "replicas and devices",
            "eval": "evaluation and logging",
            "project": "projected wall-clock: each step's projected_time_s (`jaxsel report` projects again)",
            "checkpoints": "checkpoints and faults"}


#: what a field does to a run (`option(effect=...)`), the one place each setting says it:
#: IDENTITY: another value is another run (a checkpoint of it is refused by name);
#: RESULTS: another value changes the trajectory (the default);
#: REPORTED: the trajectory is the same, what the run reports is not (a resume refuses it);
#: FREE: a resume may change it (how long, how often it logs, where and how it runs);
#: LOCATION: where the run lives, which a resume sets itself and a reproduction never takes;
#: KEPT: a resume takes it from the run's checkpoints, whatever the command line says
IDENTITY, RESULTS, REPORTED, FREE, LOCATION, KEPT = "identity", "results", "reported", "free", "location", "kept"
EFFECTS = (IDENTITY, RESULTS, REPORTED, FREE, LOCATION, KEPT)


class ConfigError(ValueError):
    """A setting that cannot work: one line naming it and what is allowed (exit code 2)."""


class Flag(NamedTuple):
    """How a field is set from the command line."""

    names: tuple[str, ...]            # "--lr"; more than one: aliases
    help: str
    commands: tuple[str, ...] = COMMANDS
    choices: tuple | Callable[[], tuple] | None = None   # a callable: the owner's list, imported when needed
    metavar: str | None = None
    parse: Callable[[str], Any] | None = None   # the flag's text -> the field's value (None: by its type)
    show: Callable[[Any], str] | None = None    # the field's value -> the flag's text (`parse`'s inverse)
    group: str = "optim"              # its section (SECTIONS)
    pairs: bool = False               # a dict field: repeatable KEY=VALUE
    keys: tuple[tuple[str, "Flag"], ...] = ()   # flags that set one key of a dict field
    key_in: tuple[str, str] | None = None       # (flag, key): the field is `flag KEY=VALUE`, no flag of its own
    old: tuple[str, ...] = ()         # last release's names: still read, hidden, each use noted

    def allowed(self) -> tuple | None:
        return self.choices() if callable(self.choices) else self.choices


class NoFlag(NamedTuple):
    """A field deliberately without a flag of its own, and why."""

    why: str
    set_by: str | None = None   # the command line's flag that sets it all the same (a job flag: --out)


def option(default: Any = dataclasses.MISSING, *, help: str = "", flag: str | tuple[str, ...] | None = None,
           no_flag: str | None = None, set_by: str | None = None, factory: Callable[[], Any] | None = None,
           effect: str = RESULTS, per_process: bool = False, **spec) -> Any:
    """A settings field declared once: its default (or `factory`), its `Flag` (`flag`: the
    names, default `--field-name`; `spec`: the Flag's other parts) or, with `no_flag`, the
    reason it has none (and `set_by`, the command line's flag that sets it anyway), what it
    does to a run (`effect`, one of EFFECTS) and whether each process may set it its own
    way (`per_process`). The flag's names and section are filled in by `section`."""
    if effect not in EFFECTS:
        raise TypeError(f"effect {effect!r} is not one of {', '.join(EFFECTS)}")
    names = (flag,) if isinstance(flag, str) else tuple(flag or ())
    meta = {"cli": NoFlag(no_flag, set_by) if no_flag else Flag(names, help, **spec),
            "effect": effect, "per_process": per_process}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def flag_name(name: str) -> str:
    """The flag a name gets unless declared otherwise: `checkpoint_every` -> `--checkpoint-every`."""
    return "--" + name.replace("_", "-")


def section(table: str):
    """Class decorator after @dataclass for one section of the settings, the `[table]` of
    config files and `--help` (SECTIONS): every field must be declared with `option`; its
    flag is put in this section, and one without names (and not a key of a section's flag)
    gets `--field-name`."""
    if table not in SECTIONS:
        raise TypeError(f"section {table!r} is not one of {', '.join(SECTIONS)}")

    def declare(cls):
        cls.TABLE = table
        for f in dataclasses.fields(cls):
            decl = f.metadata.get("cli")
            if decl is None:
                raise TypeError(f"{cls.__name__}.{f.name} is not declared with option(...)")
            if isinstance(decl, Flag):
                names = decl.names or (() if decl.key_in else (flag_name(f.name),))
                decl = decl._replace(names=names, group=table)
            f.metadata = type(f.metadata)({**f.metadata, "cli": decl, "section": table})
        return cls
    return declare


def declarations(cls) -> dict[str, Flag | NoFlag]:
    """Each field of `cls` and its declaration, in field order."""
    return {f.name: f.metadata["cli"] for f in dataclasses.fields(cls)}


def flags_of(cls, command: str) -> dict[str, Flag]:
    """The fields `command` takes as flags, and their flags."""
    return {name: d for name, d in declarations(cls).items() if isinstance(d, Flag) and command in d.commands}


def flag_of(cls, name: str) -> str | None:
    """A field's flag (its first name; `--project network` for a key of a section's flag),
    None for a field without one."""
    decl = declarations(cls)[name]
    if not isinstance(decl, Flag):
        return None
    return " ".join(decl.key_in) if decl.key_in else decl.names[0]


def section_of(cls, name: str) -> str:
    """The section (`[table]`) a field belongs to."""
    return next(f.metadata["section"] for f in dataclasses.fields(cls) if f.name == name)


def with_effect(cls, *effects: str) -> frozenset[str]:
    """The fields of `cls` declared with one of `effects` (`option(effect=...)`)."""
    return frozenset(f.name for f in dataclasses.fields(cls) if f.metadata["effect"] in effects)


def per_process(cls) -> frozenset[str]:
    """The fields each process of a multi-host run may set its own way (paths, host threads)."""
    return frozenset(f.name for f in dataclasses.fields(cls) if f.metadata["per_process"])


def named(cls, name: str) -> str:
    """A field's name and its flag, as errors name a setting: `wandb_project (--wandb)`."""
    decl = declarations(cls)[name]
    flag = decl.set_by if isinstance(decl, NoFlag) else flag_of(cls, name)
    return f"{name} ({flag})" if flag else name


def default_of(cls, name: str) -> Any:
    """A field's declared default (its factory's value for a dict)."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def field_value(cls, name: str, value, where: str):
    """A value of field `name` of settings `cls`, typed or from a config file, read as its
    flag reads it: text through the flag's own parser (`--augment on`, `--inject 0.1,0.5`),
    anything else coerced to the field's type; a value outside the flag's choices is a
    ConfigError here. The command line's KEY=VALUE flags and config files read values here."""
    from ..core.options import OptionError, coerce

    decl = declarations(cls)[name]
    hint = typing.get_type_hints(cls)[name]
    flag = decl if isinstance(decl, Flag) else None
    if typing.get_origin(hint) is dict or hint is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where} must be a table of KEY = VALUE, got {value!r}")
        keys = dict(flag.keys) if flag is not None else {}
        return {k: _parsed(keys[k], v, f"{where}.{k}") if k in keys and isinstance(v, str) else v
                for k, v in value.items()}
    if flag is not None and flag.parse is not None and isinstance(value, str):
        value = _parsed(flag, value, where)
    else:
        try:
            value = coerce(value, hint, where)
        except OptionError as err:
            raise ConfigError(str(err)) from None
    allowed = flag.allowed() if flag is not None else None
    if allowed is not None and value not in allowed:
        raise ConfigError(f"{where} must be one of {', '.join(map(str, allowed))}, got {value!r}")
    return value


def _parsed(flag: Flag, text: str, where: str):
    try:
        return flag.parse(text)
    except ValueError as err:
        raise ConfigError(f"{where} ({flag.names[0]}) {err}") from None
