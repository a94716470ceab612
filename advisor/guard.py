"""Where the analysis of one input is fenced: an unexpected exception becomes one sentence naming the input.

Loaders turn bad input into :class:`~advisor.errors.TraceError`; analyzers and
rules must accept any table a loader makes. When one does not (a division by
a zero that real data never had, a column of an unexpected type), the user
gets :class:`~advisor.errors.AnalysisError`: the file, the exception and the
line of advisor's code where it broke, said to be a bug, and a non-zero exit,
not a traceback of the advisor's insides. ``--debug`` shows that traceback.
Nothing is carried on with: the run stops there.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from advisor.errors import AdvisorError, AnalysisError

__all__ = ["analysing"]


@contextmanager
def analysing(what: str) -> Iterator[None]:
    """``with analysing("trace.json"): run_analyzers(...)``: any non-advisor exception -> AnalysisError."""
    try:
        yield
    except AdvisorError:
        raise
    except Exception as exc:  # noqa: BLE001 - re-raised as one sentence naming the input; never swallowed
        raise AnalysisError(what, exc) from exc
