"""What kind of trace this is: devices, ranks, and which evidence it carries."""

from __future__ import annotations

from typing import Any

from advisor.analyze.findings import FactSpec
from advisor.analyze.framework import event_names as by_name
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import analyzer
from advisor.load.kineto_shapes import META_KEY as SHAPES_KEY
from advisor.load.kineto_window import META_KEY

PROVIDES = (
    FactSpec("trace.has_gpu", "bool", "the trace has GPU kernels, copies or memsets"),
    FactSpec("trace.device", "text", "name of the first GPU in deviceProperties, or 'cpu'"),
    FactSpec("trace.vendor", "text", "cpu, nvidia or amd"),
    FactSpec("trace.rank", "count", "this trace's rank (0 when not distributed)"),
    FactSpec("trace.world_size", "count", "number of ranks in the job (1 when not distributed)"),
    FactSpec("trace.source_labels", "bool", "ops carry exact call sites (advisor::src labels)"),
    FactSpec("trace.python_stacks", "bool", "the trace has Python frames (with_stack=True)"),
    FactSpec("trace.cpu_ops", "count", "number of CPU operator events in the trace"),
    FactSpec("trace.shapes", "text", "where the operators' input shapes come from: 'window' (recorded with it), "
             "'apart' (steps the collector recorded for their shapes before the warm-up) or 'none'"),
    FactSpec("trace.shapes_matched", "fraction", "of the operators in the steps, those given input shapes by the steps "
             "recorded apart (dtypes only where those steps disagreed on the dims do not count)"),
    FactSpec("trace.partial", "bool", "only a window of the trace was analysed: its JSON is over the memory budget"),
    FactSpec("trace.analysed_steps", "text", "which steps were analysed and why, when not all were"),
    FactSpec("trace.total_steps", "count", "ProfilerStep ranges in the whole trace, when only some were analysed"),
)


@analyzer("trace_info", provides=PROVIDES)
def trace_info(view: TraceView) -> dict[str, Any]:
    """Devices, ranks and which kinds of evidence the trace carries."""
    cats = {str(c) for c in view.events["cat"].unique()}
    devices = view.trace.devices
    names = " ".join(str(d.get("name", "")) for d in devices)
    runtime = view.events.loc[view.events["cat"] == "cuda_runtime", "name"]
    amd = "AMD" in names or "Radeon" in names or "Instinct" in names or bool(
        by_name.where(runtime, lambda n: n.startswith("hip")).any())
    has_gpu = view.trace.has_gpu
    return {
        "trace.has_gpu": has_gpu,
        "trace.device": str(devices[0].get("name", "gpu")) if devices else ("gpu" if has_gpu else "cpu"),
        "trace.vendor": ("amd" if amd else "nvidia") if has_gpu else "cpu",
        "trace.rank": int(view.meta.get("rank", 0) or 0),
        "trace.world_size": int(view.meta.get("world_size", 1) or 1),
        "trace.source_labels": bool(view.host["src_exact"].any()),
        "trace.python_stacks": "python_function" in cats,
        "trace.cpu_ops": int((view.events["cat"] == "cpu_op").sum()),
        **_window(view.meta.get(META_KEY)),
        **_shapes(view),
    }


def _shapes(view: TraceView) -> dict[str, Any]:
    """Where the input shapes come from (see :mod:`advisor.load.kineto_shapes`)."""
    apart = view.meta.get(SHAPES_KEY)
    if isinstance(apart, dict) and apart.get("ops"):
        return {"trace.shapes": "apart", "trace.shapes_matched": apart.get("matched", 0) / apart["ops"]}
    dims = view.events["input_dims"] if "input_dims" in view.events else None
    recorded = dims is not None and bool(by_name.where(dims, lambda d: d not in ("", "[]")).any())
    return {"trace.shapes": "window" if recorded else "none"}


def _window(window: Any) -> dict[str, Any]:
    """The facts of a trace analysed on a window of its steps (see :mod:`advisor.load.kineto_window`)."""
    if not window:
        return {"trace.partial": False}
    return {"trace.partial": True, "trace.analysed_steps": str(window["note"]),
            "trace.total_steps": int(window["total_steps"])}
