"""`python -m jaxsel.cli`: the `jaxsel` command."""
import sys

from . import main

sys.exit(main())
