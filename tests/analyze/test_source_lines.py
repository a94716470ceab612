"""Source lines: which calls a line makes directly, and what a loop of them costs.

Small traces in Kineto's format, written the way the collector's labels and the profiler's Python frames
(``with_stack=True``) record them, with every time chosen so the expected figures can be worked out by hand;
then the real HF inference traces, whose model call must not look like a loop.
"""

from __future__ import annotations

import json

import pytest

from advisor.analyze.framework.source_lines import source_lines
from advisor.analyze.framework.source_loops import Loop, loops_of
from advisor.analyze.framework.view import TraceView
from advisor.load.kineto import load_kineto
from advisor.naming import is_direct_label, parse_source_callers, parse_source_label, source_label
from conftest import fixture_path


def _x(cat: str, name: str, ts: float, dur: float, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1, "args": args}


def _op(name: str, ts: float, dur: float, seq: int) -> dict:
    return _x("cpu_op", name, ts, dur, **{"Sequence number": seq})


def _label(line: int, func: str, ts: float, dur: float, direct: bool) -> dict:
    return _x("cpu_op", source_label("train.py", line, func, direct=direct), ts, dur)


def _backward(name: str, ts: float, seq: int) -> dict:
    return _x("cpu_op", f"autograd::engine::evaluate_function: {name}", ts, 50, **{"Sequence number": seq})


def loop_trace(model_inside: bool = False) -> dict:
    """One 10 ms step of ``train.py``: a model call, then three iterations of a per-sample loop (line 20 calls
    ``exp``, line 21 ``sum`` and ``add``, 40 us each, every iteration 300 us), then ``loss.backward()``:
    the loop's nine backward functions, 100 us apart, the model's and a leaf's. ``model_inside`` puts another model
    call between the second and the third iteration."""
    events = [_x("user_annotation", "ProfilerStep#1", 0, 10000),
              _label(42, "main", 100, 500, direct=False), _op("aten::linear", 110, 480, 1)]
    for i in range(3):
        b = 1000 + 300 * i
        events += [_label(20, "loss", b, 50, True), _op("aten::exp", b + 5, 40, 10 + i),
                   _label(21, "loss", b + 100, 50, True), _op("aten::sum", b + 105, 40, 20 + i),
                   _label(21, "loss", b + 200, 50, True), _op("aten::add", b + 205, 40, 30 + i)]
    if model_inside:
        events += [_label(42, "main", 1560, 30, direct=False), _op("aten::linear", 1562, 26, 2)]
    events.append(_label(44, "main", 3000, 2000, direct=True))
    order = [("AddBackward0", 32), ("SumBackward0", 22), ("ExpBackward0", 12), ("AddBackward0", 31),
             ("SumBackward0", 21), ("ExpBackward0", 11), ("AddBackward0", 30), ("SumBackward0", 20),
             ("ExpBackward0", 10)]
    events += [_backward(name, 3010 + 100 * k, seq) for k, (name, seq) in enumerate(order)]
    events.append(_x("cpu_op", "autograd::engine::evaluate_function: AddmmBackward0", 4000, 200,
                     **{"Sequence number": 1}))
    # a leaf's gradient: no forward op to charge it to, so it stays with loss.backward()
    events.append(_x("cpu_op", "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 4300, 30))
    return {"traceEvents": events}


def stacked_trace() -> dict:
    """One step with the profiler's Python frames: a user function calls ``x.exp()``, ``F.cross_entropy``
    and a Linear module."""
    return {"traceEvents": [
        _x("user_annotation", "ProfilerStep#1", 0, 2000),
        _x("python_function", "train.py(15): loss", 10, 1500),
        _x("python_function", "<built-in method exp of Tensor object at 0x7f01>", 20, 40),
        _x("cpu_op", "aten::exp", 25, 30),
        _x("python_function", "torch/nn/functional.py(3400): cross_entropy", 100, 300),
        _x("python_function", "<built-in function cross_entropy_loss>", 110, 280),
        _x("cpu_op", "aten::cross_entropy_loss", 120, 260),
        _x("python_function", "nn.Module: Linear_0", 500, 400),
        _x("python_function", "torch/nn/modules/module.py(1750): _call_impl", 501, 398),
        _x("python_function", "torch/nn/modules/linear.py(125): forward", 502, 396),
        _x("python_function", "<built-in function linear>", 510, 380),
        _x("cpu_op", "aten::linear", 520, 360),
    ]}


def _view(tmp_path, trace: dict) -> TraceView:
    path = tmp_path / "trace.pt.trace.json"
    path.write_text(json.dumps(trace))
    return TraceView(load_kineto(path))


def _ops(view: TraceView) -> dict[str, tuple[int, bool]]:
    """Operator name -> (its source line, whether the line called it directly), for the first of each name."""
    host = view.host
    ops = host[(host["cat"] == "cpu_op").to_numpy()]
    names = view.host_name_texts[(host["cat"] == "cpu_op").to_numpy()]
    out: dict[str, tuple[int, bool]] = {}
    for name, line, direct in zip(names, ops["src_line"], ops["src_direct"]):
        out.setdefault(str(name), (int(line), bool(direct)))
    return out


def test_the_direct_mark_round_trips_through_the_label() -> None:
    direct, through = source_label("a/b.py", 12, "f", direct=True), source_label("a/b.py", 12, "f")
    assert direct == "advisor::src a/b.py:12 in f [direct]"
    assert parse_source_label(direct) == parse_source_label(through) == ("a/b.py", 12, "f")
    assert is_direct_label(direct) and not is_direct_label(through)
    assert parse_source_label(source_label("t.py", 3, "<lambda>", direct=True)) == ("t.py", 3, "<lambda>")


def test_the_callers_round_trip_through_the_label() -> None:
    label = source_label("h.py", 8, "row", direct=True, callers=(("m.py", 30, "<listcomp>"), ("m.py", 30, "forward")))
    assert label == "advisor::src h.py:8 in row [direct] < m.py:30 in <listcomp> < m.py:30 in forward"
    assert parse_source_label(label) == ("h.py", 8, "row") and is_direct_label(label)
    assert parse_source_callers(label) == (("m.py", 30, "<listcomp>"), ("m.py", 30, "forward"))
    assert not is_direct_label(source_label("h.py", 8, "row", callers=(("m.py", 30, "f"),)))


def test_labels_say_which_calls_are_direct_and_backward_work_inherits_it(tmp_path) -> None:
    ops = _ops(_view(tmp_path, loop_trace()))
    assert ops["aten::linear"] == (42, False)  # the model's op: made by library code below line 42
    assert ops["aten::exp"] == (20, True) and ops["aten::sum"] == (21, True)
    # autograd's work is charged to the forward op's line, direct like the forward call
    assert ops["autograd::engine::evaluate_function: ExpBackward0"] == (20, True)
    assert ops["autograd::engine::evaluate_function: AddmmBackward0"] == (42, False)
    # loss.backward() is the line's own call, but autograd's work below it is not
    assert ops["autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"] == (44, False)


def test_frames_say_which_calls_are_direct(tmp_path) -> None:
    ops = _ops(_view(tmp_path, stacked_trace()))
    assert ops["aten::exp"] == (15, True)  # a C method called from the user's frame
    assert ops["aten::cross_entropy_loss"] == (15, True)  # through torch's own F.cross_entropy only
    assert ops["aten::linear"] == (15, False)  # below nn.Module's and Linear's frames


#: ``train.py`` as loop_trace() labels it: the loop's header on line 19, its body on lines 20 and 21 of ``loss``;
#: the model call (42) and ``loss.backward()`` (44) in ``main``, in no loop
TRAIN_PY = "\n" * 17 + """def loss(logits, total):
    for row in logits:
        e = row.exp()
        total = total + e.sum()
    return total
""" + "\n" * 18 + """def main(model, x):
    logits = model(x)

    loss(logits, 0).backward()
"""


def _loops(tmp_path, trace: dict, source: str | None = TRAIN_PY) -> dict:
    """lines.loops and lines.loops_unread of a trace, with ``train.py`` beside it (None: no source)."""
    if source is not None:
        (tmp_path / "train.py").write_text(source)
    path = tmp_path / "trace.pt.trace.json"
    path.write_text(json.dumps(trace))
    return source_lines(TraceView(load_kineto(path), {"source_roots": [str(tmp_path)]}))


def test_the_loop_holds_its_whole_body_and_costs_its_span_less_one_iteration(tmp_path) -> None:
    facts = _loops(tmp_path, loop_trace())
    assert facts["lines.loops_unread"] == []
    loop = facts["lines.loops"][0]
    assert (loop["site"], loop["kind"], loop["busiest"]) == ("train.py:19 (loss)", "for", "train.py:21 (loss)")
    assert loop["ops_per_step"] == 9 and loop["iterations"] == 3 and loop["ops_per_iteration"] == 3
    # from its first call (1005 us) to the end of its last (1845 us), both lines and the Python between them
    assert loop["span_ms"] == pytest.approx(0.840) and loop["runs_per_step"] == 1
    # its nine backward functions, 3010 us to 3860 us
    assert loop["backward_ms"] == pytest.approx(0.850)
    assert loop["loop_ms"] == pytest.approx(1.690) and loop["share"] == pytest.approx(0.169)
    # every call is its operator's only size: no arithmetic a batched call would keep, one iteration of three
    assert loop["work_ms"] == pytest.approx(0.0)
    assert loop["batched_ms"] == pytest.approx(1.690 / 3) and loop["saved_ms"] == pytest.approx(1.690 * 2 / 3)
    assert loop["saved_share"] == pytest.approx(0.169 * 2 / 3)
    assert [row["line"] for row in facts["lines.loops"]] == [19]  # main's calls are in no loop


def test_without_the_source_each_line_stands_alone(tmp_path) -> None:
    facts = _loops(tmp_path, loop_trace(), source=None)
    assert facts["lines.loops_unread"] == ["train.py"]
    lines = {row["line"]: row for row in facts["lines.loops"]}
    assert {row["kind"] for row in lines.values()} == {"line"}
    line = lines[21]
    assert line["direct_ops_per_step"] == 6 and line["iterations"] == 3 and line["runs_per_step"] == 1
    # from its first call (1105 us) to the end of its last (1845 us): the loop body's line 20 is inside
    assert line["span_ms"] == pytest.approx(0.740)
    # its six backward functions, 3010 us to 3760 us, the loop's others between them
    assert line["backward_ms"] == pytest.approx(0.750)
    assert line["saved_ms"] == pytest.approx(1.490 * 2 / 3)
    assert lines[20]["span_ms"] == pytest.approx(0.640) and lines[20]["backward_ms"] == pytest.approx(0.650)
    assert 42 not in lines and 44 not in lines  # no direct calls: a model's op, and autograd's work
    by_ops = {row["line"]: row for row in facts["lines.by_ops"]}
    assert by_ops[42]["ops_per_step"] == 2 and by_ops[42]["direct_ops_per_step"] == 0
    assert by_ops[21]["ops_per_step"] == 12 and by_ops[21]["direct_ops_per_step"] == 6


def test_a_file_changed_since_the_run_is_not_read_as_the_one_that_ran(tmp_path) -> None:
    facts = _loops(tmp_path, loop_trace(), source=TRAIN_PY.replace("def loss(", "def other("))
    assert facts["lines.loops_unread"] == ["train.py"]
    assert {row["kind"] for row in facts["lines.loops"]} == {"line"}


def test_a_call_through_library_code_breaks_the_run(tmp_path) -> None:
    loop = _loops(tmp_path, loop_trace(model_inside=True))["lines.loops"][0]
    assert loop["line"] == 19 and loop["runs_per_step"] == 2 and loop["iterations"] == 1.5
    # 1005-1545 us and 1605-1845 us: the model call between them is not the loop's
    assert loop["span_ms"] == pytest.approx(0.540 + 0.240)


def _helper_trace() -> dict:
    """Three iterations of the loop on line 20 of ``loss`` calling ``row()`` of helpers.py, whose line 3 makes
    two calls: the labels name the loop's line as the caller."""
    events = [_x("user_annotation", "ProfilerStep#1", 0, 2000)]
    for i in range(3):
        b = 100 + 200 * i
        events += [_x("cpu_op", source_label("helpers.py", 3, "row", True, (("train.py", 20, "loss"),)), b, 50),
                   _op("aten::tanh", b + 5, 40, 10 + i),
                   _x("cpu_op", source_label("helpers.py", 3, "row", True, (("train.py", 20, "loss"),)), b + 60, 50),
                   _op("aten::mul", b + 65, 40, 20 + i)]
    return {"traceEvents": events}


def test_a_helper_called_per_row_is_charged_to_the_loop_around_its_caller(tmp_path) -> None:
    (tmp_path / "helpers.py").write_text("def row(r):\n\n    return r.tanh() * r\n")
    loop = _loops(tmp_path, _helper_trace())["lines.loops"][0]
    assert (loop["site"], loop["busiest"]) == ("train.py:19 (loss)", "helpers.py:3 (row)")
    assert loop["iterations"] == 3 and loop["ops_per_iteration"] == 2
    assert loop["span_ms"] == pytest.approx(0.500)  # the first tanh at 105 us to the end of the last mul, 605 us


def test_a_loop_over_big_layers_saves_little(tmp_path) -> None:
    """Four iterations of a 2 ms Linear and its 20 us ReLU in the loop, and a 30 us Linear outside it: the
    layers' time beyond the small Linear's is arithmetic a batched form keeps."""
    events = [_x("user_annotation", "ProfilerStep#1", 0, 10000),
              _label(42, "main", 10, 40, direct=False), _op("aten::linear", 12, 30, 1)]
    for i in range(4):
        b = 100 + 2100 * i
        events += [_label(20, "loss", b, 2010, False), _op("aten::linear", b + 5, 2000, 10 + i),
                   _label(21, "loss", b + 2030, 30, True), _op("aten::relu", b + 2035, 20, 20 + i)]
    loop = _loops(tmp_path, {"traceEvents": events})["lines.loops"][0]
    assert loop["iterations"] == 4 and loop["work_ms"] == pytest.approx(4 * 1.970)
    # 105 us to 8455 us, less the work: the Python between the calls and the ReLUs, three iterations of four
    assert loop["loop_ms"] == pytest.approx(8.350)
    assert loop["saved_ms"] == pytest.approx((8.350 - 4 * 1.970) * 3 / 4)
    assert loop["saved_share"] == pytest.approx(0.03525)  # of the 10 ms step, where the loop is 84% of it


def test_source_loops_finds_the_innermost_loop_of_the_function_that_ran(tmp_path) -> None:
    source = tmp_path / "m.py"
    source.write_text("def f(x):\n    for a in x:\n        while a:\n            a = g(a)\n"
                      "    return [h(r) for r in x]\n\ndef g(a):\n    return a\n")
    loops = loops_of(source)
    assert loops.innermost(4, "f") == Loop(3, 4, "while", "f")
    assert loops.innermost(5, "<listcomp>") == Loop(5, 5, "comprehension", "f")
    assert loops.innermost(8, "g") is None  # in no loop of its own function
    assert loops.innermost(4, "g") is None and not loops.holds(4, "g")  # not the file that ran
    assert loops_of(tmp_path / "absent.py") is None


@pytest.mark.parametrize("folder", ["Qwen_Qwen1.5-0.5B-Chat__1016005", "gaunernst_bert-small-uncased__1016001",
                                    "Falconsai_nsfw_image_detection__1016002", "resnet_act_checkpoint"])
def test_a_line_that_calls_a_whole_model_is_not_a_loop(folder: str) -> None:
    view = TraceView(load_kineto(fixture_path("tracelens", "mi300x", folder, "trace.json.gz")))
    facts = source_lines(view)
    top = facts["lines.by_ops"][0]
    assert top["ops_per_step"] >= 100 and top["direct_ops_per_step"] <= 2, top
    assert all(row["direct_ops_per_step"] <= 2 for row in facts["lines.loops"])


def test_calls_made_once_per_run_do_not_outvote_a_body_of_one_operator() -> None:
    """``torch.stack([F.cross_entropy(out[i:i+1], y[i:i+1]) for i in ...]).mean()``: the body makes two slices and
    one cross_entropy a sample; the stack and the mean around it run once. Two keys made one call each and one key
    made 128: the once-per-run calls must not make the loop one iteration long (and so save nothing)."""
    import pandas as pd

    from advisor.analyze.framework.python_loops import _iterations

    rows = []
    for step in range(2):
        rows += [{"unit": 0, "step": step, "run": 0, "src_direct": True, "src_file": "t.py", "src_line": 9,
                  "src_func": "main", "callers": "", "name": name} for name in ("aten::stack", "aten::mean")]
        for _ in range(128):
            rows += [{"unit": 0, "step": step, "run": 0, "src_direct": True, "src_file": "t.py", "src_line": 9,
                      "src_func": "<listcomp>", "callers": "", "name": name}
                     for name in ("aten::slice", "aten::slice", "aten::cross_entropy_loss")]
    iterations = _iterations(pd.DataFrame(rows))
    assert iterations[0] >= 128
