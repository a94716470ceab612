"""How much of the trace could be used as recorded: the loader's data-quality counts, as facts.

The counting is the loader's (:mod:`advisor.load.kineto_quality`: it knows the
format); this analyzer only states it, so that the verdict and the report can
say when figures rest on events with missing fields or impossible values.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from advisor.analyze.findings import FactSpec, records
from advisor.analyze.registry import analyzer
from advisor.analyze.framework.view import TraceView

PROVIDES = (
    FactSpec("trace.bad_events", "count", "complete events that cannot be used as recorded: a field the analysis "
                                          "needs is missing, or a value is impossible"),
    FactSpec("trace.bad_share", "fraction", "those events' share of the trace's complete events"),
    FactSpec("trace.bad_steps", "count", "ProfilerStep ranges among those events"),
    FactSpec("trace.data_quality", "text", "the data-quality note (fields, problems, counts), when such events are "
                                           "over 1% of the trace or touch a ProfilerStep"),
    FactSpec("trace.data_problems", "table", "each problem found, per event kind", columns={
        "kind": "text: event kind (normalised category, or ProfilerStep)",
        "field": "text: the field at fault ('' for problems of the whole event)",
        "problem": "text: missing, not a number, negative, outside the profiled span, duplicated",
        "count": "count: events of the kind with the problem",
        "total": "count: events of the kind",
        "treatment": "text: what the tables hold for them (left out, zero, start, kept)",
    }),
)


@analyzer("data_quality", provides=PROVIDES)
def data_quality(view: TraceView) -> dict[str, Any]:
    """Events with missing fields or impossible values, as the loader counted them."""
    quality = view.trace.quality
    return {
        "trace.bad_events": quality.bad,
        "trace.bad_share": quality.share,
        "trace.bad_steps": quality.bad_steps,
        "trace.data_quality": quality.note() if quality.material else None,
        "trace.data_problems": records(asdict(p) for p in quality.problems) if quality.problems else None,
    }
