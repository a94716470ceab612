"""The collector's source labels under the real profiler: a call the user's line makes itself is marked direct.

The user's code is a real file in a source root; it runs under ``torch.profiler`` with a
:class:`SourceMarker` enabled, as the collector runs a script, and the exported trace is read back by the
loader and the view.
"""

from __future__ import annotations

import collections
import importlib.util
from pathlib import Path

import torch

from advisor.analyze.framework.view import TraceView
from advisor.collect.source_marker import SourceMarker
from advisor.load.kineto import load_kineto
from advisor.naming import SOURCE_PREFIX

USER_CODE = '''\
import torch
import torch.nn.functional as F


def run(model, x, y):
    total = x.new_zeros(())
    for i in range(4):
        total = total + x[i].exp().sum()
    loss = F.cross_entropy(model(x), y)
    return total, 1 - loss
'''
LOOP, MIXED, REFLECTED = 8, 9, 10  # the loop's line; F.cross_entropy(model(x), y); 1 - loss


def _profile(tmp_path: Path) -> tuple[collections.Counter, TraceView]:
    (tmp_path / "src").mkdir()
    path = tmp_path / "src" / "usercode.py"
    path.write_text(USER_CODE)
    spec = importlib.util.spec_from_file_location("usercode", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    marker = SourceMarker([tmp_path / "src"])
    model, x, y = torch.nn.Linear(3, 5), torch.randn(4, 3), torch.tensor([0, 1, 2, 3])
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        marker.push_bottom()
        marker.enabled = True
        try:
            module.run(model, x, y)
        finally:
            marker.enabled = False
            marker.remove()
    trace = tmp_path / "trace.pt.trace.json"
    prof.export_chrome_trace(str(trace))
    labels = collections.Counter(e.name for e in prof.events() if e.name.startswith(SOURCE_PREFIX))
    return labels, TraceView(load_kineto(trace))


def test_direct_calls_and_calls_through_a_model_are_labelled_apart(tmp_path: Path) -> None:
    labels, view = _profile(tmp_path)
    # four iterations of x[i], .exp(), .sum() and +: each called by the loop's line itself
    assert labels[f"advisor::src usercode.py:{LOOP} in run [direct]"] == 16
    # the Linear's op is made by torch.nn's code below the line; F.cross_entropy is the line's own call,
    # as is the reflected `1 - loss` (both reach the mode through torch's Python dispatch)
    assert labels[f"advisor::src usercode.py:{MIXED} in run"] == 1
    assert labels[f"advisor::src usercode.py:{MIXED} in run [direct]"] == 1
    assert labels[f"advisor::src usercode.py:{REFLECTED} in run [direct]"] == 1
    host = view.host
    ops = host[(host["cat"] == "cpu_op").to_numpy() & host["op_top"].to_numpy()]
    names = view.host_name_texts[(host["cat"] == "cpu_op").to_numpy() & host["op_top"].to_numpy()]
    direct = {(str(n), int(line)): bool(d) for n, line, d in zip(names, ops["src_line"], ops["src_direct"])}
    assert direct[("aten::exp", LOOP)] and direct[("aten::select", LOOP)]
    assert not direct[("aten::linear", MIXED)] and direct[("aten::cross_entropy_loss", MIXED)]


HELPER_CODE = '''\
import torch


def row(r):
    return r.tanh()


class Block(torch.nn.Module):
    def forward(self, x):
        return x.sigmoid()


def run(x):
    out = [row(r) for r in x]
    return Block()(out[0])
'''


def test_a_helper_names_the_users_lines_that_called_it_and_a_module_does_not(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    path = tmp_path / "src" / "helpers.py"
    path.write_text(HELPER_CODE)
    spec = importlib.util.spec_from_file_location("helpers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    marker = SourceMarker([tmp_path / "src"])
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        marker.push_bottom()
        marker.enabled = True
        try:
            module.run(torch.randn(3, 4))
        finally:
            marker.enabled = False
            marker.remove()
    labels = collections.Counter(e.name for e in prof.events() if e.name.startswith(SOURCE_PREFIX))
    comprehension = "<listcomp>" if any("<listcomp>" in label for label in labels) else "run"  # 3.12 inlines it
    chain = f" < helpers.py:14 in {comprehension}" + (" < helpers.py:14 in run" if comprehension != "run" else "")
    # the chain stops at this test's own frame, which is not in the source root
    assert labels[f"advisor::src helpers.py:5 in row [direct]{chain}"] == 3
    # Block.forward is called through nn.Module's code: its caller is not named
    assert labels["advisor::src helpers.py:10 in forward [direct]"] == 1
