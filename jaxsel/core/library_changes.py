"""The error for an installed JAX, Flax or Orbax that no longer has what jaxsel relies on.

jaxsel uses these libraries' public APIs, and reads the few things they do not publish in
one function each (tests/test_public_apis.py lists them with the reason). Each of those
checks what it reads and raises LibraryChanged when it is gone or has another shape,
instead of carrying on without it: a peer watchdog that never starts, a deadlock guard
that passes every decision, a FLOP count that skips a primitive.
"""
from __future__ import annotations


class LibraryChanged(RuntimeError):
    """An installed library moved or reshaped something jaxsel relies on (one line naming
    the library, its version and what moved; the CLI exits 1)."""
