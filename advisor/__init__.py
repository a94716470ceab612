"""advisor: tells a PyTorch user why their training is slow and what to change.

The stages (see docs/DESIGN.md): ``collect`` runs a profiler, ``load`` turns its
output into tables, ``analyze`` turns tables into findings, ``engine``
evaluates YAML rules over findings into diagnoses, ``workflow`` decides
whether to go deeper, ``report`` renders the result.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
