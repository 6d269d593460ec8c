"""`python -m jaxsel.cli`: the `jaxsel` command."""
import sys

from .main import main

sys.exit(main())
