"""Input shapes recorded apart from the window and given back to its operators (advisor.load.kineto_shapes).

The collector records the window without ``record_shapes`` (it keeps every operator's inputs alive until the
profiler stops: measured here, a strided-copies model's recorded steps took 31-35 ms with it, 20-23 ms without,
15.5 ms unprofiled) and records two steps before the warm-up for their shapes alone.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from advisor.analyze.framework.trace_info import trace_info
from advisor.analyze.framework.view import TraceView
from advisor.load.kineto import load_kineto
from advisor.load.kineto_shapes import META_KEY
from advisor.naming import SHAPES_DIR
from conftest import run_cli

MAIN, OTHER = 1, 2


def _step(n: int, t: float, ops: list[tuple[int, str, dict]], shapes: bool) -> tuple[list[dict], float]:
    """A ProfilerStep range at ``t`` holding ``ops`` (tid, name, args) one after another; the new time."""
    events, at = [], t + 1
    for tid, name, args in ops:
        events.append({"ph": "X", "cat": "cpu_op", "name": name, "ts": at, "dur": 5, "pid": 1, "tid": tid,
                       "args": args if shapes else {}})
        at += 10
    events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "ts": t, "dur": at - t,
                   "pid": 1, "tid": MAIN, "args": {}})
    return events, at + 5


def _args(dims: list, types: list, concrete: list | None = None) -> dict:
    return {"Input Dims": dims, "Input type": types, "Concrete Inputs": concrete or [""] * len(dims)}


def _write(path: Path, steps: list[list[tuple[int, str, dict]]], first: int, shapes: bool) -> None:
    events, t = [], 1000.0
    for i, ops in enumerate(steps):
        more, t = _step(first + i, t, ops, shapes)
        events += more
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)


MM = (MAIN, "aten::mm", _args([[64, 32], [32, 16]], ["float", "float"]))
ADD = (MAIN, "aten::add", _args([[64, 16], [64, 16], []], ["float", "float", "Scalar"], ["", "", "1"]))
BWD = (OTHER, "aten::mm", _args([[16, 64], [64, 32]], ["float", "float"]))


def _recorded(tmp_path: Path, window: list, shape_steps: list) -> Path:
    trace = tmp_path / "framework" / "rank0.pt.trace.json.gz"
    _write(trace, window, first=8, shapes=False)
    _write(trace.parent / SHAPES_DIR / trace.name, shape_steps, first=3, shapes=True)
    return trace


def test_every_operator_of_a_steady_loop_gets_its_shapes(tmp_path: Path) -> None:
    ops = [MM, ADD, MM, BWD]
    second_mm = (MAIN, "aten::mm", _args([[64, 16], [16, 8]], ["float", "float"]))
    ops = [MM, ADD, second_mm, BWD]
    trace = load_kineto(_recorded(tmp_path, [ops] * 3, [ops] * 2))
    assert trace.meta[META_KEY] == {"file": f"{SHAPES_DIR}/rank0.pt.trace.json.gz", "steps": 2, "ops": 12,
                                    "matched": 12, "dtypes_only": 0, "repeated": 0, "note": None}
    cpu = trace.events[trace.events["cat"] == "cpu_op"]
    main_mm = cpu[(cpu["name"] == "aten::mm") & (cpu["tid"] == MAIN)]["input_dims"].astype(str).tolist()
    # the k-th aten::mm of the thread in each step is the k-th of the shape steps, not any aten::mm
    assert main_mm == ["[[64,32],[32,16]]", "[[64,16],[16,8]]"] * 3
    other = cpu[cpu["tid"] == OTHER]["input_dims"].astype(str).unique().tolist()
    assert other == ["[[16,64],[64,32]]"]
    assert set(cpu[cpu["name"] == "aten::add"]["concrete_inputs"].astype(str)) == {'["","","1"]'}
    facts = trace_info(TraceView(trace))
    assert facts["trace.shapes"] == "apart" and facts["trace.shapes_matched"] == 1.0


def test_the_steps_mirrored_on_the_gpu_streams_are_not_steps(tmp_path: Path) -> None:
    """Kineto repeats each ProfilerStep range on the GPU streams (gpu_user_annotation), later in time; only the
    host's ranges place the operators."""
    ops = [MM, MM, ADD]
    trace_path = _recorded(tmp_path, [ops] * 2, [ops] * 2)
    with gzip.open(trace_path, "rt") as f:
        doc = json.load(f)
    mirrored = [{**e, "cat": "gpu_user_annotation", "ts": e["ts"] + 7, "pid": 0, "tid": 7}
                for e in doc["traceEvents"] if e["name"].startswith("ProfilerStep#")]
    with gzip.open(trace_path, "wt") as f:
        json.dump({"traceEvents": doc["traceEvents"] + mirrored}, f)
    meta = load_kineto(trace_path).meta[META_KEY]
    assert (meta["ops"], meta["matched"]) == (6, 6)  # a mirror would cut each step between its two aten::mm


def test_shapes_that_vary_between_the_shape_steps_give_dtypes_only(tmp_path: Path) -> None:
    """A variable sequence length: the window's own dims cannot be known, so none are given; the dtypes are."""
    short = (MAIN, "aten::mm", _args([[48, 32], [32, 16]], ["float", "float"]))
    trace = load_kineto(_recorded(tmp_path, [[MM, ADD]] * 2, [[MM, ADD], [short, ADD]]))
    meta = trace.meta[META_KEY]
    assert (meta["matched"], meta["dtypes_only"]) == (2, 2)
    mm = trace.events[trace.events["name"] == "aten::mm"]
    assert mm["input_dims"].astype(str).tolist() == ["", ""]
    assert mm["input_types"].astype(str).tolist() == ['["float","float"]'] * 2
    assert trace_info(TraceView(trace))["trace.shapes_matched"] == pytest.approx(0.5)
    assert meta["note"].startswith("input shapes are known for 2 of the window's 4 operators; 2 have their dtypes only")
    assert not trace.quality.meta_notes  # the times are whole: not a data-quality problem


def test_a_scalar_that_differs_between_the_shape_steps_leaves_the_dims_known(tmp_path: Path) -> None:
    """A sampler's random index reaches aten::select as a scalar: it differs every step, the dims do not."""
    def select(index: str) -> tuple[int, str, dict]:
        return MAIN, "aten::select", _args([[1920, 28, 28], [], []], ["float", "Scalar", "Scalar"], ["", "0", index])

    trace = load_kineto(_recorded(tmp_path, [[select("5"), MM]] * 2, [[select("1590"), MM], [select("1740"), MM]]))
    meta = trace.meta[META_KEY]
    assert (meta["matched"], meta["dtypes_only"], meta["note"]) == (4, 0, None)
    picked = trace.events[trace.events["name"] == "aten::select"]
    assert picked["input_dims"].astype(str).tolist() == ["[[1920,28,28],[],[]]"] * 2
    assert picked["concrete_inputs"].astype(str).tolist() == ["", ""]  # which index the window took is unknown


def test_strides_recorded_apart_are_given_where_the_shape_steps_agree_on_them(tmp_path: Path) -> None:
    """The layout copies' pricing reads strides (advisor.analyze.framework.copy_price): a window recorded without
    shapes has none, the shape recording gives them."""
    def copy(name: str, strides: list) -> tuple[int, str, dict]:
        return MAIN, name, {**_args([[16, 64, 32], []], ["float", "Scalar"]), "Input Strides": [strides, []]}

    steady = copy("aten::contiguous", [2048, 1, 64])
    window = [[steady, copy("aten::clone", [2048, 1, 64])]] * 2
    shape_steps = [[steady, copy("aten::clone", [2048, 1, 64])], [steady, copy("aten::clone", [2048, 32, 1])]]
    trace = load_kineto(_recorded(tmp_path, window, shape_steps))
    ops = trace.events[trace.events["cat"] == "cpu_op"]
    strides = ops.groupby("name", observed=True)["input_strides"].agg(lambda c: c.astype(str).tolist())
    assert strides["aten::contiguous"] == ["[[2048,1,64],[]]"] * 2
    assert strides["aten::clone"] == ["", ""]  # the shape steps disagree: which strides the window had is unknown
    assert ops[ops["name"] == "aten::clone"]["input_dims"].astype(str).tolist() == ["[[16,64,32],[]]"] * 2


def test_a_step_that_ran_an_operator_more_often_gets_no_shapes_for_it(tmp_path: Path) -> None:
    """A window step that took another branch (one more aten::mm) cannot be matched call by call."""
    window = [[MM, ADD], [MM, MM, ADD]]
    trace = load_kineto(_recorded(tmp_path, window, [[MM, ADD]] * 2))
    cpu = trace.events[trace.events["cat"] == "cpu_op"]
    dims = cpu["input_dims"].astype(str).tolist()
    assert dims[:2] == ["[[64,32],[32,16]]", "[[64,16],[64,16],[]]"]
    assert dims[2:4] == ["", ""] and dims[4] == "[[64,16],[64,16],[]]"  # the adds still match
    assert trace.meta[META_KEY]["matched"] == 3 and trace.meta[META_KEY]["ops"] == 5
    assert "2 have none (their step ran them a different number of times" in trace.meta[META_KEY]["note"]


def test_a_closure_evaluated_a_varying_number_of_times_is_placed_by_its_unit(tmp_path: Path) -> None:
    """LBFGS's line search runs the closure (forward and backward) a different number of times each step: the
    k-th aten::mm is the (k mod 2)-th of the closure's two, whatever the count."""
    second_mm = (MAIN, "aten::mm", _args([[64, 16], [16, 8]], ["float", "float"]))
    closure = [MM, ADD, second_mm, BWD]
    trace = load_kineto(_recorded(tmp_path, [closure * 4, closure * 1], [closure * 3, closure * 2]))
    meta = trace.meta[META_KEY]
    assert (meta["ops"], meta["matched"], meta["dtypes_only"], meta["note"]) == (20, 20, 0, None)
    assert meta["repeated"] == 20  # the shape steps ran different counts: nothing matches call for call
    cpu = trace.events[trace.events["cat"] == "cpu_op"]
    main_mm = cpu[(cpu["name"] == "aten::mm") & (cpu["tid"] == MAIN)]["input_dims"].astype(str).tolist()
    assert main_mm == ["[[64,32],[32,16]]", "[[64,16],[16,8]]"] * 5


def test_a_repeat_is_not_assumed_from_one_call_or_a_broken_unit(tmp_path: Path) -> None:
    """Two calls at least make a unit in every shape step, and a window step must run whole units."""
    once = load_kineto(_recorded(tmp_path / "once", [[MM, ADD], [MM, MM, ADD]], [[MM, ADD], [MM, ADD, ADD]]))
    assert once.meta[META_KEY]["repeated"] == 0  # aten::mm ran once per shape step: no unit to repeat
    second_mm = (MAIN, "aten::mm", _args([[64, 16], [16, 8]], ["float", "float"]))
    odd = load_kineto(_recorded(tmp_path / "odd", [[MM, second_mm, MM]], [[MM, second_mm] * 2, [MM, second_mm] * 3]))
    assert odd.meta[META_KEY]["matched"] == 0  # three calls are not a whole number of two-call units


def test_a_broken_shape_file_is_said_and_the_trace_still_loads(tmp_path: Path) -> None:
    trace_path = _recorded(tmp_path, [[MM, ADD]] * 2, [[MM, ADD]] * 2)
    shapes = trace_path.parent / SHAPES_DIR / trace_path.name
    shapes.write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X", "na'))
    trace = load_kineto(trace_path)
    assert "error" in trace.meta[META_KEY]
    note = trace.meta[META_KEY]["note"]
    assert "input shapes recorded apart were not used" in note and str(shapes) in note
    assert not trace.quality.meta_notes
    assert set(trace.events["input_dims"].astype(str)) == {""}
    assert trace_info(TraceView(trace))["trace.shapes"] == "none"


def _diagnosed(tmp_path: Path, code: str, wait: int) -> tuple[Path, dict]:
    """``advisor diagnose`` on a script of ``code`` with ``wait`` wait steps, one warm-up and three recorded: the
    run folder and its facts."""
    script = tmp_path / "script.py"
    script.write_text(code)
    out = tmp_path / "run"
    cli = run_cli("diagnose", str(script), "--out", str(out), "-q", "--no-escalate", "--no-trial", "--wait", str(wait),
                  "--warmup", "1", "--active", "3", cwd=tmp_path)
    assert cli.code == 0, cli.stderr
    return out, {f["name"]: f["value"] for f in json.loads((out / "findings.json").read_text())["facts"]}


def test_the_collector_records_shapes_apart_and_the_window_without_them(tmp_path: Path) -> None:
    """A real run: two shape steps before the warm-up, a window without shapes, and every operator matched."""
    out, facts = _diagnosed(tmp_path, (
        "import torch\n"
        "model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "x = torch.randn(16, 32)\n"
        "for _ in range(40):\n"
        "    opt.zero_grad()\n"
        "    model(x).pow(2).mean().backward()\n"
        "    opt.step()\n"), wait=3)
    window = out / "framework" / "rank0.pt.trace.json.gz"
    recorded = json.loads(gzip.decompress(window.read_bytes()))
    assert not any("Input Dims" in e.get("args", {}) for e in recorded["traceEvents"])
    shapes = json.loads(gzip.decompress((window.parent / SHAPES_DIR / window.name).read_bytes()))
    steps = sorted(e["name"] for e in shapes["traceEvents"] if e.get("name", "").startswith("ProfilerStep#"))
    assert steps == ["ProfilerStep#1", "ProfilerStep#2"]  # never step 0, the script's set-up
    trace = load_kineto(window)
    meta = trace.meta[META_KEY]
    assert meta["steps"] == 2 and meta["ops"] > 0 and meta["matched"] == meta["ops"]
    assert meta["note"] is None  # all matched: nothing to say
    addmm = trace.events[trace.events["name"] == "aten::addmm"]["input_dims"].astype(str)
    assert len(addmm) == 6 and set(addmm) == {"[[64],[16,32],[32,64],[],[]]", "[[8],[16,64],[64,8],[],[]]"}
    assert facts["trace.shapes"] == "apart" and facts["trace.shapes_matched"] == 1.0


def test_with_one_wait_step_the_window_records_its_own_shapes(tmp_path: Path) -> None:
    out, facts = _diagnosed(tmp_path, (
        "import torch\n"
        "model = torch.nn.Linear(8, 8)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for _ in range(20):\n"
        "    opt.zero_grad(); model(torch.randn(4, 8)).sum().backward(); opt.step()\n"), wait=1)
    assert not (out / "framework" / SHAPES_DIR).exists()
    assert facts["trace.shapes"] == "window"


def test_a_decoding_loop_whose_shapes_grow_gets_a_note_not_an_inconclusive_verdict(tmp_path: Path) -> None:
    """Each call of the model sees one more token: its dims differ between the shape steps and the window, so
    most operators get dtypes only. The times are whole, so the verdict stands; the findings say what is missing."""
    out, facts = _diagnosed(tmp_path, (
        "import torch\n"
        "layer = torch.nn.TransformerEncoderLayer(32, 2, 64, batch_first=True)\n"
        "model = torch.nn.TransformerEncoder(layer, 1, enable_nested_tensor=False).eval()\n"
        "tokens = torch.randn(1, 4, 32)\n"
        "with torch.no_grad():\n"
        "    for _ in range(30):\n"
        "        tokens = torch.cat([tokens, model(tokens)[:, -1:]], dim=1)\n"), wait=3)
    notes = json.loads((out / "findings.json").read_text())["notes"]
    assert facts["trace.shapes"] == "apart" and facts["trace.shapes_matched"] < 0.5
    assert not facts.get("trace.data_quality")
    assert any("input shapes are known for" in n and "dtypes only" in n for n in notes)
    verdict = json.loads((out / "diagnoses.json").read_text())["verdict"]
    assert verdict["status"] != "inconclusive", verdict
