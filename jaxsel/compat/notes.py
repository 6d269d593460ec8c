"""The warning every one-release shim raises: a DeprecationWarning that the command line
prints once as a one-line note (`cli/deprecated.renamed_option_notes`), not as a warning."""
from __future__ import annotations


class NotedDeprecation(DeprecationWarning):
    """A deprecation the command line prints once as a one-line note, not as a warning."""
