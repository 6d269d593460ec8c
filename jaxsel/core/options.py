"""Options: strategies, triggers and aggregators declare theirs as dataclass fields.

`build(cls, options, ...)` is how a name plus user settings (CLI flags, `--opt key=value`,
experiment configs) become an object: an unknown or inapplicable option is an error that
names the valid ones, never dropped; values are coerced to the field's declared type with
an error that names the option (typed `key=value` pairs are read by `pairs.py`). An option's meaning is
the string written under its field (an attribute docstring), read by `option_docs` for
help texts (`jaxsel strategies NAME`): declared once, beside the field. An option renamed
since the last release (a class's `aliases`, old name -> new) is renamed before `build`
sees it, by the one-release shim `jaxsel.compat.renamed_options`.
"""
from __future__ import annotations

import ast
import dataclasses
import inspect
import math
import textwrap
import types
import typing
from typing import Any, Mapping

from .checks import INT32_MAX, MAX_SEED, int_limit, is_int, is_numeral


class OptionError(ValueError):
    """A bad option name or value (the CLI reports it as one line, exit code 2)."""


def _options(cls) -> list[dataclasses.Field]:
    """`cls`'s init fields in its constructor's order: positional ones first, then the
    keyword-only ones (a shared base's options, e.g. DiLoCo's outer loop)."""
    return sorted((f for f in dataclasses.fields(cls) if f.init), key=lambda f: bool(f.kw_only))


def option_names(cls) -> list[str]:
    """The options `cls` declares: its dataclass init fields."""
    return [f.name for f in _options(cls)]


def option_docs(cls) -> dict[str, str]:
    """Each field's attribute docstring (the string literal under `name: type = default`),
    whitespace folded, from `cls` and its bases (the nearest class's wins); a class whose
    source cannot be read (defined in a console) gives none."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object:
            continue
        docs.update(_class_docs(klass))
    return docs


def _class_docs(klass) -> dict[str, str]:
    try:
        source = textwrap.dedent(inspect.getsource(klass))
    except (OSError, TypeError):
        return {}
    body = next((n.body for n in ast.parse(source).body if isinstance(n, ast.ClassDef)), [])
    docs = {}
    for node, after in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def accepts(cls, option: str) -> bool:
    """Whether `cls` takes `option` (by name or by its last release's name, `aliases`)."""
    return getattr(cls, "aliases", {}).get(option, option) in option_names(cls)


def option_defaults(cls) -> dict[str, Any]:
    """Each option's default (fields without one are left out)."""
    out = {}
    for f in _options(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def build(cls, options: Mapping[str, Any] | None, *, kind: str, name: str,
          context: Mapping[str, Any] | None = None):
    """`cls(**options)` after checking every name and coercing every value.

    `context` holds run facts (e.g. total_steps) passed only to fields `cls` lists in
    `context_fields` and only where the user set none; they are never an error.
    """
    options = {k: v for k, v in (options or {}).items() if v is not None}
    valid = option_names(cls)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        listed = ", ".join(valid) if valid else "none"
        raise OptionError(f"{kind} {name!r} has no option {', '.join(map(repr, unknown))}; "
                          f"its options: {listed}")
    hints = type_hints(cls)
    kwargs = {k: coerce(v, hints.get(k, Any), f"{kind} {name!r} option {k!r}") for k, v in options.items()}
    for key in getattr(cls, "context_fields", ()):
        if key in valid and key not in kwargs and (context or {}).get(key) is not None:
            kwargs[key] = context[key]
    for key, value in kwargs.items():
        check_int_limit(value, hints.get(key, Any), f"{kind} {name!r} option {key!r}", key)
    try:
        return cls(**kwargs)
    except TypeError as err:   # a required option missing
        raise OptionError(f"{kind} {name!r}: {err}") from None


def check_int_limit(value, hint, what: str, option: str) -> None:
    """An integer option past what it can hold once traced (`checks.int_limit`: int32, 32
    bits for a seed) is an OptionError here, for every strategy, trigger and aggregator
    alike (plugins' too), never an OverflowError inside jit after the run has started."""
    if int not in allowed_types(hint)[0] or not is_int(value):
        return
    limit = int_limit(option)
    low = 0 if limit == MAX_SEED else -INT32_MAX - 1
    if not low <= value <= limit:
        bound = f"<= {limit}" if value > limit else f">= {low}"
        held = "a 32-bit seed" if limit == MAX_SEED else "an int32"
        raise OptionError(f"{what} must be an integer {bound} (it is traced as {held}), got {value!r}")


def type_hints(cls) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:   # an annotation that does not resolve: no coercion
        return {}


def allowed_types(hint) -> tuple[list[type], bool]:
    """(the plain types a hint allows, whether None is allowed); Any allows everything."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        parts = typing.get_args(hint)
    else:
        parts = (hint,)
    plain = [p for p in parts if p in (bool, int, float, str)]
    return plain, type(None) in parts


def coerce(value, hint, what: str):
    """`value` as the declared type (int, float, bool, str; unions of them), or OptionError."""
    plain, nullable = allowed_types(hint)
    if not plain or value is None and nullable:
        return value
    if isinstance(value, str) and nullable and value.lower() == "none":
        return None
    for typ in plain:
        ok, out = _try(typ, value)
        if ok:
            return out
    kinds = " or ".join({bool: "true/false", int: "an integer", float: "a finite number", str: "a word"}[t]
                        for t in plain)
    raise OptionError(f"{what} must be {kinds}, got {value!r}")


def _try(typ, value):
    if typ is bool:
        if isinstance(value, bool):
            return True, value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return True, value.lower() == "true"
        return False, None
    if typ is int:
        if isinstance(value, bool):
            return False, None
        if isinstance(value, int):
            return True, value
        if isinstance(value, float) and value.is_integer():
            return True, int(value)
        if isinstance(value, str) and is_numeral(value):
            try:
                return True, int(value)
            except ValueError:
                return False, None
        return False, None
    if typ is float:
        if isinstance(value, bool) or (isinstance(value, str) and not is_numeral(value)):
            return False, None
        try:
            out = float(value)
        except (TypeError, ValueError):
            return False, None
        return (True, out) if math.isfinite(out) else (False, None)
    return (True, value) if isinstance(value, str) else (False, None)


