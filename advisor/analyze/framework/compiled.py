"""torch.compile as the trace shows it: compiled regions, graph breaks, and compilation inside the steps.

What a Kineto trace of a compiled model holds (PyTorch 2.x):

- ``Torch-Compiled Region: F/C``: one call of a frame Dynamo compiled; F numbers
  the frame, C its compilation (C > 0: compiled again after its guards failed).
- ``TorchDynamo Cache Lookup``: the guard check before each such call.
- Inside a region, the graph itself runs as ``CompiledFunction`` (training)
  and ``## Call CompiledFxGraph <hash> ##`` (Inductor); its backward as
  ``CompiledFunctionBackward``.
- Compilation itself: events named ``... (dynamo_timed)``: per frame
  ``_compile.compile_inner``, with AOT autograd's and Inductor's passes
  nested inside it, and ``compile_fx_inner`` for a backward graph compiled
  lazily at its first call.

A *graph break* splits one compiled frame into graphs with Python run
eagerly between them; the code after the break is a new frame (a resume
function) called from that eager code, so it shows as a region nested inside
another region. Whole-graph compilation runs one region per compiled call
with nothing nested in it. Per step this analyzer counts the outermost
regions, the regions nested in them (each one a graph break, or a function
Dynamo could not inline), and the graphs run; the eager operators between
the graphs inside the regions; and the compilations inside the analysed
steps, where a warmed-up run should have none.

When the advisor's own module labels ran inside compiled code (a collector
that traced its forward hooks into the graph), the structure is the
instrumentation's, not the program's: ``compile.labels_traced`` says so.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from advisor.analyze import intervals
from advisor.analyze.findings import FactSpec
from advisor.analyze.framework.op_cost import op_rows
from advisor.analyze.framework.per_step import NS_PER_MS, step_ms
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import analyzer
from advisor.naming import MODULE_PREFIX

_REGION = re.compile(r"^Torch-Compiled Region: (\d+)/(\d+)")
#: the annotation Dynamo opens for each frame it compiles, with the compilation's F/C
_COMPILE_ID = re.compile(r"^dynamo_data: compile_id=\[?(\d+)/(\d+)")
GRAPH_NAMES = ("CompiledFunction", "CompiledFunctionBackward")
#: torch.compile's own timers mark every compilation step: Dynamo's tracing, AOT autograd, Inductor
COMPILE_SUFFIX = " (dynamo_timed)"
#: what runs inside a region besides the graph: guard checks and the AOT wrappers
WRAPPERS = frozenset({"TorchDynamo Cache Lookup", "Pregraph bytecode", "AOTDispatcher Runtime Wrapper Prologue"})

PROVIDES = (
    FactSpec("compile.regions_per_step", "count", "outermost torch.compile region calls per step"),
    FactSpec("compile.nested_regions_per_step", "count",
             "compiled regions called from inside another per step: one per graph break (or frame Dynamo could not inline)"),
    FactSpec("compile.graphs_per_step", "count", "compiled graphs run per step, forward (CompiledFunction or Inductor calls)"),
    FactSpec("compile.graphs_per_region", "ratio",
             "graphs per outermost region call: 1 for a whole-graph compile, more with each graph break"),
    FactSpec("compile.breaks_per_step", "count",
             "graphs past the first within one outermost compiled call, per step: the graph breaks that ran"),
    FactSpec("compile.eager_ms", "ms", "time per step in operators that run eagerly inside compiled regions, between graphs"),
    FactSpec("compile.overhead_ms", "ms",
             "time per step in guard checks and graph wrappers of the regions past the first per outermost call"),
    FactSpec("compile.graph_wrapper_ms", "ms",
             "own time per step of the wrappers of the graphs past the first per outermost call, forward and backward"),
    FactSpec("compile.break_ms", "ms", "what the graph breaks cost that the trace shows: eager time, the extra regions' "
             "overhead and their graphs' wrappers"),
    FactSpec("compile.break_share", "fraction", "that time as a share of the step"),
    FactSpec("compile.compiles_per_step", "count",
             "compilations inside the analysed steps per step (a frame's forward, a backward compiled at its first call)"),
    FactSpec("compile.compile_ms", "ms", "time per step spent compiling inside the analysed steps"),
    FactSpec("compile.compile_share", "fraction", "that time as a share of the step"),
    FactSpec("compile.recompiles_per_step", "count",
             "compilations inside the steps of a frame compiled before (compile id F/C with C >= 1), per step"),
    FactSpec("compile.recompile_ms", "ms", "compile time per step in the steps that recompile a frame"),
    FactSpec("compile.recompile_share", "fraction", "that time as a share of the step"),
    FactSpec("compile.max_compile_id", "count", "the highest compilation number C of the regions the steps ran (F/C)"),
    FactSpec("compile.frames", "count", "distinct compiled frames the steps ran"),
    FactSpec("compile.labels_traced", "bool",
             "the advisor's module labels ran inside compiled code, so the regions are the instrumentation's"),
)


@analyzer("compiled", needs=("cpu_op",), provides=PROVIDES)
def compiled(view: TraceView) -> dict[str, Any]:
    """Compiled regions, graph breaks and compilation inside the steps of a torch.compile run."""
    host = view.host
    ops = op_rows(view)
    in_step = (host["step"] >= 0).to_numpy()
    region_id = view.host_names(_region_id, object)
    is_region = ops.is_op & in_step & view.host_names(lambda n: bool(_REGION.match(n)), bool)
    compiles = in_step & view.host_names(lambda n: n.endswith(COMPILE_SUFFIX), bool)
    if not is_region.any() and not compiles.any():
        return {}
    steps = max(view.step_count, 1)
    parent, depth = ops.parent, ops.depth
    enclosing_region = intervals.enclosing(parent, depth, is_region)
    outer = is_region & (enclosing_region < 0)
    nested = is_region & (enclosing_region >= 0)
    compile_outer = ops.outermost(compiles) if compiles.any() else compiles
    graphs, breaks = _graphs(view, ops, outer)
    compile_ns = float(host["dur"].to_numpy()[compile_outer].sum())
    mean = step_ms(view)
    out: dict[str, Any] = {
        "compile.regions_per_step": int(outer.sum()) / steps,
        "compile.nested_regions_per_step": int(nested.sum()) / steps,
        "compile.graphs_per_step": graphs / steps,
        "compile.breaks_per_step": breaks / steps,
        "compile.compiles_per_step": int(compile_outer.sum()) / steps,
        "compile.compile_ms": compile_ns / steps / NS_PER_MS,
        "compile.compile_share": compile_ns / steps / NS_PER_MS / mean if mean else 0.0,
        "compile.labels_traced": _labels_traced(view, enclosing_region),
    }
    if out["compile.regions_per_step"]:
        out["compile.graphs_per_region"] = out["compile.graphs_per_step"] / out["compile.regions_per_step"]
    ids = [region_id[r] for r in np.flatnonzero(is_region)]
    if ids:
        out["compile.max_compile_id"] = max(c for _, c in ids)
        out["compile.frames"] = len({f for f, _ in ids})
    out["compile.eager_ms"], out["compile.overhead_ms"] = _between_graphs(view, ops, is_region, nested, compiles)
    out["compile.graph_wrapper_ms"] = _graph_wrappers(view, graphs, breaks)
    out["compile.break_ms"] = out["compile.eager_ms"] + out["compile.overhead_ms"] + out["compile.graph_wrapper_ms"]
    out["compile.break_share"] = out["compile.break_ms"] / mean if mean else 0.0
    out.update(_recompiles(view, compile_outer, mean))
    return out


def _region_id(name: str) -> tuple[int, int] | None:
    m = _REGION.match(name)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _graphs(view: TraceView, ops: Any, outer: np.ndarray) -> tuple[int, int]:
    """Forward graphs run inside the outermost regions, and how many of them are past the first of their call.

    A graph is a CompiledFunction call (training), else an Inductor graph call (inference).
    """
    owner = intervals.enclosing(ops.parent, ops.depth, outer)
    inside = ops.in_step & (owner >= 0)
    graph = inside & view.host_names(lambda n: n == "CompiledFunction", bool)
    if not graph.any():
        graph = (view.host["step"] >= 0).to_numpy() & (owner >= 0) & view.host_names(
            lambda n: n.startswith("## Call CompiledFxGraph"), bool)
    per_call = np.bincount(owner[graph], minlength=len(outer))[outer] if graph.any() else np.zeros(int(outer.sum()))
    return int(graph.sum()), int(np.maximum(per_call - 1, 0).sum())


def _between_graphs(view: TraceView, ops: Any, is_region: np.ndarray, nested: np.ndarray,
                    compiles: np.ndarray) -> tuple[float, float]:
    """Eager operator time inside regions outside their graphs, and the extra graphs' own cost, ms per step.

    The own cost of a nested region that runs a graph is its self time, the graph wrappers directly
    inside it, and the guard check (``TorchDynamo Cache Lookup``) right before it. Nested regions
    without a graph (a compiled hook or helper with no tensor work) are left out.
    """
    host = view.host
    steps = max(view.step_count, 1)
    graph = view.host_names(lambda n: n in GRAPH_NAMES or n.startswith("## Call CompiledFxGraph"), bool)
    wrapper = view.host_names(lambda n: n in WRAPPERS, bool)
    skip = graph | is_region | compiles | wrapper
    # an operator belongs to the nearest enclosing region, graph, wrapper or compilation
    owner = intervals.enclosing(ops.parent, ops.depth, skip)
    direct = (owner >= 0) & (ops.parent_op == owner)
    in_region = np.zeros(len(host), bool)
    in_region[direct] = is_region[owner[direct]]
    eager = ops.in_step & ~skip & in_region
    dur, self_ns = host["dur"].to_numpy(), host["self_ns"].to_numpy()
    region_of = intervals.enclosing(ops.parent, ops.depth, is_region)
    runs_graph = np.zeros(len(host), bool)
    has_graph = graph & (region_of >= 0)
    runs_graph[region_of[has_graph]] = True
    extra = nested & runs_graph
    in_extra = np.zeros(len(host), bool)
    in_extra[direct] = extra[owner[direct]]
    own = float(self_ns[extra].sum()) + float(dur[ops.in_step & wrapper & in_extra].sum())
    return float(dur[eager].sum()) / steps / NS_PER_MS, (own + _guard_checks(view, extra)) / steps / NS_PER_MS


#: a graph's own wrappers: AOT autograd's forward and backward functions, and the engine's node for the backward
GRAPH_WRAPPERS = frozenset({*GRAPH_NAMES, "autograd::engine::evaluate_function: CompiledFunctionBackward"})


def _graph_wrappers(view: TraceView, graphs: int, breaks: int) -> float:
    """ms per step of the own time of the graphs past the first: their wrappers, forward and backward.

    Every graph runs through AOT autograd's ``CompiledFunction`` and, in the backward, a
    ``CompiledFunctionBackward`` node of its own; their own time (outside the compiled code they call) is
    paid per graph. The backward nodes are not inside the regions, so the extra graphs' part is their share
    of the graphs.
    """
    if graphs <= 0 or breaks <= 0:
        return 0.0
    host = view.host
    rows = (host["step"] >= 0).to_numpy() & view.host_names(lambda n: n in GRAPH_WRAPPERS, bool)
    # own time net of every child, the compiled graph's call (an annotation, not an operator) included
    parent, dur = host["parent"].to_numpy(), host["dur"].to_numpy().astype("float64")
    has_parent = parent >= 0
    children = np.bincount(parent[has_parent], weights=dur[has_parent], minlength=len(host))
    own = float(np.clip(dur[rows] - children[rows], 0, None).sum())
    return own * breaks / graphs / max(view.step_count, 1) / NS_PER_MS


def _guard_checks(view: TraceView, regions: np.ndarray) -> float:
    """ns of the ``TorchDynamo Cache Lookup`` that runs right before each of ``regions`` on its thread."""
    host = view.host
    lookup = np.flatnonzero((host["step"] >= 0).to_numpy()
                            & view.host_names(lambda n: n == "TorchDynamo Cache Lookup", bool))
    targets = np.flatnonzero(regions)
    if len(lookup) == 0 or len(targets) == 0:
        return 0.0
    tid, ts, end, dur = (host[c].to_numpy() for c in ("tid", "ts", "end", "dur"))
    total = 0.0
    for t in np.unique(tid[targets]):
        mine = lookup[tid[lookup] == t]
        if len(mine) == 0:
            continue
        mine = mine[np.argsort(end[mine], kind="stable")]
        k = np.searchsorted(end[mine], ts[targets[tid[targets] == t]], side="right") - 1
        total += float(dur[mine[k[k >= 0]]].sum())
    return total


def _recompiles(view: TraceView, compile_outer: np.ndarray, mean: float) -> dict[str, Any]:
    """Recompilations in the steps (compile ids F/C with C >= 1), and the compile time of the steps that have one."""
    host = view.host
    steps = max(view.step_count, 1)
    ids = view.host_names(lambda n: _compile_number(n), "int64")
    marks = (host["step"] >= 0).to_numpy() & (ids >= 1)
    step_of = host["step"].to_numpy()
    recompiling = np.unique(step_of[marks])
    in_those = compile_outer & np.isin(step_of, recompiling)
    ms = float(host["dur"].to_numpy()[in_those].sum()) / steps / NS_PER_MS
    return {"compile.recompiles_per_step": int(marks.sum()) / steps, "compile.recompile_ms": ms,
            "compile.recompile_share": ms / mean if mean else 0.0}


def _compile_number(name: str) -> int:
    """C of ``dynamo_data: compile_id=F/C``; -1 for other names."""
    m = _COMPILE_ID.match(name)
    return int(m.group(2)) if m else -1


def _labels_traced(view: TraceView, enclosing_region: np.ndarray) -> bool:
    """Whether an advisor module label opened inside a compiled region (its forward hooks ran in compiled code)."""
    label = view.host_names(lambda n: n.startswith(MODULE_PREFIX), bool)
    return bool((label & (enclosing_region >= 0)).any())
