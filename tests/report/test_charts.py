"""Charts: drawn from the facts that exist, skipped with a reason otherwise, and inert SVG."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from advisor.report.charts import (compare_chart, gpu_chart, phase_chart, rank_chart, report_charts, roofline_chart,
                                   top_chart)
from advisor.report.trail import build_trail

SVG = "{http://www.w3.org/2000/svg}"
EVIL = "<script>alert(1)</script>"
PHASES = [{"phase": p, "ms": ms, "share": ms / 100, "source": "advisor labels"}
          for p, ms in (("dataloader", 40.0), ("forward", 30.0), ("backward", 25.0), ("optimizer", 4.0), ("other", 1.0))]
STEPS = [{"step": i, "time_ms": 100.0 + i, "dataloader_ms": 40.0 + i, "forward_ms": 30.0, "backward_ms": 25.0,
          "optimizer_ms": 4.0, "other_ms": 1.0} for i in range(5, 10)]


def _inert(svg: str) -> ET.Element:
    """Valid SVG, with no script, no foreign object, no link, no event handler: names are escaped text."""
    root = ET.fromstring(svg)
    tags = {el.tag for el in root.iter()}
    assert not tags & {f"{SVG}script", f"{SVG}foreignObject", f"{SVG}a", f"{SVG}image", f"{SVG}style"}
    assert not any(k.startswith("on") or "href" in k for el in root.iter() for k in el.attrib)
    assert "<script" not in svg and "javascript:" not in svg
    return root


def _texts(svg: str) -> list[str]:
    return [el.text or "" for el in _inert(svg).iter(f"{SVG}text")]


def test_phase_chart_has_the_mean_and_every_step() -> None:
    chart = phase_chart({"phases.table": PHASES, "steps.table": STEPS})
    root = _inert(chart.svg)
    # one bar per phase per row: (mean + 5 steps) x 5 phases, each named by its phase
    bars = [el.find(f"{SVG}title").text for el in root.iter(f"{SVG}rect") if el.find(f"{SVG}title") is not None]
    assert len(bars) == 6 * 5 and bars[:5] == ["dataloader", "forward", "backward", "optimizer", "other"]
    texts = _texts(chart.svg)
    assert "step 9" in texts and "mean" in texts and "100 ms" in texts  # the mean step's total after its bar


def test_charts_are_deterministic() -> None:
    facts = {"phases.table": PHASES, "steps.table": STEPS}
    assert phase_chart(facts).svg == phase_chart(facts).svg


def test_hostile_kernel_names_end_up_as_text_only() -> None:
    rows = [{"name": EVIL, "ms": 5.0}, {"name": "void f<float, 4>(T&&) & \"q\" $x$", "ms": 3.0}]
    chart = top_chart({"kernels.top": rows}, "kernels.top", "ms", "kernels", "Top GPU kernels")
    # the names come back as the text they were, escaped in the file
    assert EVIL in _texts(chart.svg) and 'f<float, 4>(T&&) & "q" $x$' in _texts(chart.svg)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in chart.svg


def test_gpu_chart_reads_each_promised_shape() -> None:
    per_step = gpu_chart({"gpu.steps": [{"step": 1, "busy_ms": 60.0, "idle_ms": 40.0},
                                        {"step": 2, "busy_ms": 70.0, "idle_ms": 30.0}]})
    assert per_step.svg and "40% idle" in _texts(per_step.svg)
    lanes = gpu_chart({"gpu.timeline": [{"start_ms": 0.0, "end_ms": 5.0, "stream": 7},
                                        {"start_ms": 9.0, "dur_ms": 3.0, "stream": 7},
                                        {"start_ms": 1.0, "end_ms": 2.0, "stream": 13}]})
    assert lanes.svg and {"stream 7", "stream 13"} <= set(_texts(lanes.svg))
    scalar = gpu_chart({"gpu.busy_fraction": 0.25, "gpu.idle_fraction": 0.75, "steps.time_ms": 80.0})
    assert scalar.svg and "mean step" in _texts(scalar.svg) and "75% idle" in _texts(scalar.svg)
    assert "CPU-only" in gpu_chart({"trace.has_gpu": False}).missing
    assert "gpu.busy_fraction" in gpu_chart({"trace.has_gpu": True}).missing


def test_rank_chart_needs_two_ranks_and_marks_the_straggler() -> None:
    rows = [{"rank": r, "step": s, "ms": 100.0 + 30.0 * (r == 2) + s} for r in range(4) for s in range(3)]
    chart = rank_chart({"ranks.step_ms": rows, "ranks.straggler": 2})
    texts = _texts(chart.svg)
    assert "ms per step, mean and min-max range (red: the straggler, rank 2)" in texts
    assert [t for t in texts if t.startswith("rank ")] == [f"rank {r}" for r in range(4)]
    assert rank_chart({"ranks.step_ms": rows[:3]}).missing == "a single rank was analysed"


def test_every_chart_says_why_it_is_missing() -> None:
    charts = report_charts({})
    assert [c.id for c in charts] == ["phases", "gpu", "kernels", "operators", "roofline", "ranks"]
    assert all(c.svg is None and c.missing for c in charts)


def test_compare_chart_pairs_each_phase() -> None:
    rows = [{"phase": "dataloader", "a": 90.0, "b": 5.0}, {"phase": "forward", "a": 80.0, "b": 85.0}]
    chart = compare_chart(rows)
    assert {"90.0 ms", "5.0 ms", "80.0 ms", "85.0 ms"} <= set(_texts(chart.svg))


def test_recorded_workflow_graph_shows_the_path_taken() -> None:
    meta = {
        "trail": [
            {"stage": "framework", "status": "ran", "reason": "always first", "command": "python t.py", "artifacts": []},
            {"stage": "system", "status": "ran", "reason": "gpu.idle_fraction 0.42 >= 0.2", "command": "nsys profile",
             "artifacts": ["system/report.nsys-rep"]},
            {"stage": "kernel", "status": "skipped", "reason": "no kernel holds 20% of GPU time", "command": None,
             "artifacts": []},
        ],
        "workflow": {"nodes": ["framework", "system", "kernel"],
                     "edges": [{"from": "framework", "to": "system", "guard": "gpu.idle_fraction >= 0.2", "taken": True},
                               {"from": "framework", "to": "kernel", "guard": "kernels.top[0].share >= 0.2",
                                "taken": False}]},
    }
    trail = build_trail(meta, [])
    assert trail["recorded"] and [s["status_text"] for s in trail["stages"]] == ["ran", "ran", "skipped"]
    texts = _texts(trail["chart"].svg)
    assert "gpu.idle_fraction >= 0.2" in texts and "kernels.top[0].share >= 0.2" in texts
    assert {"framework", "system", "kernel", "ran", "skipped"} <= set(texts)


def test_unrecorded_trail_lists_requested_escalations_as_not_run() -> None:
    trail = build_trail({"kind": "diagnose", "script_command": ["python", "t.py"], "traces": ["framework/r.json"]},
                        [{"rule_id": "DL001", "escalate": "nsys"}])
    assert not trail["recorded"]
    assert [(s["stage"], s["status"]) for s in trail["stages"]] == [("framework", "ran"), ("system", "not_run")]
    assert "DL001 asked for nsys" in trail["stages"][1]["reason"]


def test_roofline_chart_places_each_operator_under_the_roof() -> None:
    rows = [{"op": "aten::bmm", "category": "GEMM", "shape": "[[96,3137,64],[96,64,3137]]", "dtype": "bf16",
             "ms_per_step": 14.5, "gflops": 120.9, "mbytes": 1875.4, "tflops_s": 99.8, "roofline_share": 0.31},
            {"op": "aten::_softmax", "category": "reduce", "shape": "[[8,12,3137,3137]]", "dtype": "bf16",
             "ms_per_step": 41.7, "gflops": 2.83, "mbytes": 3603.8, "tflops_s": 0.82, "roofline_share": 0.21},
            {"op": "aten::relu", "category": "unmodelled", "ms_per_step": 1.0}]  # no model: not a point
    facts = {"ops.efficiency": rows, "roofline.gpu": "AMD Instinct MI300X", "roofline.memory_tb_s": 5.3,
             "roofline.peak_tflops": 1307.4, "roofline.peak_dtype": "bf16"}
    root = _inert(roofline_chart(facts).svg)
    tips = [el.find(f"{SVG}title").text for el in root.iter(f"{SVG}circle")]
    assert len(tips) == 2 and tips[0].startswith("aten::_softmax") and "21% of its roofline" in tips[0]  # heaviest first
    assert "AMD Instinct MI300X (bf16 peak 1307.4 TFLOP/s, 5.3 TB/s)" in _texts(roofline_chart(facts).svg)
    # without a spec: the points, no roof
    bare = roofline_chart({"ops.efficiency": rows})
    assert bare.svg and not any(t.startswith("AMD") for t in _texts(bare.svg))
    assert "ops.efficiency" in roofline_chart({}).missing
