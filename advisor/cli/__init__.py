"""The ``advisor`` command line. Thin: it parses options, calls the library, prints.

Errors: only the advisor's own :class:`~advisor.errors.AdvisorError` is
caught, and printed as one line; ``--debug`` shows the traceback instead.
"""

from advisor.cli import (  # noqa: F401  (register their commands)
    commands_compare,
    commands_rules,
    commands_run,
    commands_workflow,
)
from advisor.cli.app import app, main

__all__ = ["app", "main"]
