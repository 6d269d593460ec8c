"""Config files' flat keys (issue 59): last release's files named every setting at the top
level (`lr = 0.1`); this release's put each in its section's table (`[optim]` then
`lr = 0.1`). A file of flat keys is read as before until `REMOVED_IN`, with one note
naming the keys and the tables they belong in."""
from __future__ import annotations

import warnings
from typing import Mapping

from .notes import NotedDeprecation

#: the release that no longer reads settings outside their sections
REMOVED_IN = "0.2.0"


class FlatSettingsWarning(NotedDeprecation):
    """A config file's settings outside their sections; the command line prints it as a note."""


def note_flat_keys(tables: Mapping[str, str], where: str, stacklevel: int = 2) -> None:
    """One FlatSettingsWarning for all of a file's flat keys (`tables`: key -> the section's
    table it belongs in), none for a file without. `stacklevel`: counted from the caller."""
    if not tables:
        return
    placed = ", ".join(f"[{table}] {key}" for key, table in tables.items())
    warnings.warn(f"{where}: settings outside their sections are read until jaxsel {REMOVED_IN}; write each in its "
                  f"table: {placed}", FlatSettingsWarning, stacklevel=stacklevel + 1)
