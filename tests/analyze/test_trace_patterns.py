"""The op-pattern analyzers on real profiler traces of small workloads, each beside its fixed form.

Every workload runs under the real ``torch.profiler`` (shapes on, one ``ProfilerStep#N`` range per
step), with the collector's own phase and module labels and source-line marker attached for the eager
workloads, as ``advisor diagnose`` records them; the compiled ones are recorded bare, as a trace made
elsewhere. The trace is loaded and analysed as ``advisor analyze`` would, and the new rules are
evaluated on the findings. Sizes are small: the tests check what is found and where, not how fast.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import run_analyzers
from advisor.engine.evaluate import evaluate_rules
from advisor.engine.rulebook import RuleBook
from advisor.load.kineto import load_kineto

BOOK = RuleBook.load(env=False)
NEW_RULES = ("CPU002", "CPU003", "CPU004", "OPT002", "CMP001", "CMP002")


class Recorded:
    def __init__(self, facts: dict, fired: dict[str, dict]) -> None:
        self.facts, self.fired = facts, fired


def record(tmp: Path, step: Callable[[], None], steps: int = 3, warmup: int = 2, labels: bool = True) -> Recorded:
    """Profile ``steps`` calls of ``step`` after ``warmup`` unprofiled ones; analyse and diagnose the trace."""
    from advisor.collect.labels import PhaseLabels
    from advisor.collect.source_marker import SourceMarker

    for _ in range(warmup):
        step()
    phase_labels, marker = PhaseLabels(nvtx=False), SourceMarker([Path(__file__).parent])
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        if labels:
            phase_labels.install()
            marker.push_bottom()
            marker.enabled = True
        try:
            for i in range(steps):
                with torch.autograd.profiler.record_function(f"ProfilerStep#{i}"):
                    step()
        finally:
            marker.enabled = False
            marker.remove()
            phase_labels.remove()
    path = tmp / "trace.json"
    prof.export_chrome_trace(str(path))
    facts = run_analyzers(TraceView(load_kineto(path))).values()
    diagnoses, _ = evaluate_rules([BOOK[r] for r in NEW_RULES], facts, facts.get("steps.time_ms"))
    return Recorded(facts, {d.rule_id: d.to_dict() for d in diagnoses})


def training_step(model: nn.Module, x: torch.Tensor, set_to_none: bool = True) -> Callable[[], None]:
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step() -> None:
        optimizer.zero_grad(set_to_none=set_to_none)
        model(x).pow(2).mean().backward()
        optimizer.step()

    return step


# layout copies -------------------------------------------------------------------------------------
class TokenMix(nn.Module):
    def __init__(self, keep_layout: bool) -> None:
        super().__init__()
        self.keep_layout = keep_layout
        self.mix = nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.keep_layout:  # x: (tokens, batch, channels)
            return x + (self.mix.weight @ x.view(32, -1)).view_as(x)
        h = self.mix(x.transpose(1, 2).contiguous())  # x: (batch, tokens, channels)
        return x + h.transpose(1, 2).contiguous()


def test_layout_copies_are_found_and_placed(tmp_path: Path) -> None:
    slow = record(tmp_path, training_step(nn.Sequential(TokenMix(False), TokenMix(False)), torch.randn(16, 32, 128)))
    f = slow.facts
    assert f["layout_copies.calls_per_step"] >= 4  # two explicit copies per block, plus backward ones
    assert 0 < f["layout_copies.explicit_ms"] < f["layout_copies.ms"]
    sites = f["layout_copies.sites"]
    explicit = [s for s in sites if s["kind"] == "explicit"]
    assert {s["line"] for s in explicit} == {_line_of("h = self.mix(x.transpose(1, 2).contiguous())"),
                                            _line_of("return x + h.transpose(1, 2).contiguous()")}
    assert all(s["file"] == Path(__file__).name for s in sites)
    assert any(s["kind"] == "implicit" and s["phase"] == "backward" for s in sites)
    assert f["layout_copies.basis"] == "host"
    fixed = record(tmp_path, training_step(nn.Sequential(TokenMix(True), TokenMix(True)), torch.randn(32, 16, 128)))
    assert fixed.facts["layout_copies.calls_per_step"] == 0 and "CPU002" not in fixed.fired


def _line_of(text: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line and "_line_of" not in line)


# zeroed gradients ----------------------------------------------------------------------------------
def wide() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512))


def test_zero_grad_without_set_to_none(tmp_path: Path) -> None:
    x = torch.randn(4, 512)
    slow = record(tmp_path, training_step(wide(), x, set_to_none=False))
    f = slow.facts
    assert f["zero_grad.calls_per_step"] == 4 and f["zero_grad.by_optimizer"] is True
    assert f["zero_grad.zero_ms"] > 0 and f["zero_grad.accumulate_ms"] > 0
    assert f["zero_grad.ms"] == pytest.approx(f["zero_grad.zero_ms"] + f["zero_grad.accumulate_ms"])
    # on a CPU trace the zeroing is priced at the whole optimizer.zero_grad call, which holds the zero_ ops
    events = load_kineto(tmp_path / "trace.json").events
    name, dur = events["name"].astype(str), events["dur"].astype(float)
    zero_grad_ns = dur[name.str.startswith("Optimizer.zero_grad#") & (events["cat"] == "user_annotation")].sum()
    zero_ops_ns = dur[name == "aten::zero_"].sum()
    assert zero_grad_ns > zero_ops_ns > 0
    assert f["zero_grad.zero_ms"] == pytest.approx(zero_grad_ns / 1e6 / 3, rel=1e-6)
    fixed = record(tmp_path, training_step(wide(), x, set_to_none=True))
    assert fixed.facts["zero_grad.calls_per_step"] == 0 and fixed.facts["zero_grad.ms"] == 0
    assert "OPT002" not in fixed.fired


def test_module_zero_grad_loop_is_found_too(tmp_path: Path) -> None:
    model, x = wide(), torch.randn(4, 512)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step() -> None:
        model.zero_grad(set_to_none=False)
        model(x).sum().backward()
        optimizer.step()

    f = record(tmp_path, step).facts
    assert f["zero_grad.by_optimizer"] is False and f["zero_grad.calls_per_step"] == 4
    assert f["zero_grad.accumulate_ms"] > 0


# hand-written attention ----------------------------------------------------------------------------
class Attention(nn.Module):
    def __init__(self, fused: bool, seq: int = 128, dim: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.fused, self.heads = fused, heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.register_buffer("causal", torch.ones(seq, seq, dtype=torch.bool).tril())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        if self.fused:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-2, -1)) / math.sqrt(k.shape[-1])
            s = s.masked_fill(~self.causal[:t, :t], float("-inf"))
            y = torch.softmax(s, dim=-1) @ v
        return y.transpose(1, 2).reshape(b, t, c)


def test_hand_written_attention_and_sdpa(tmp_path: Path) -> None:
    x = torch.randn(2, 128, 64)
    slow = record(tmp_path, training_step(nn.Sequential(Attention(False), Attention(False)), x))
    f = slow.facts
    assert f["attention.unfused_per_step"] == 2
    assert 0 < f["attention.matmul_ms"] and 0 < f["attention.pointwise_ms"]
    assert f["attention.ms"] == pytest.approx(f["attention.matmul_ms"] + f["attention.pointwise_ms"])
    assert f["attention.pointwise_unmasked_ms"] == 0 and f["attention.dropout"] is False  # masked, no dropout
    assert f["attention.where"].startswith(f"{Path(__file__).name}:{_line_of('y = torch.softmax(s, dim=-1) @ v')}")
    assert f["attention.module"].startswith("Sequential.")
    fixed = record(tmp_path, training_step(nn.Sequential(Attention(True), Attention(True)), x))
    assert fixed.facts["attention.unfused_per_step"] == 0 and "CPU003" not in fixed.fired


def test_multihead_attention_returning_weights_is_unfused(tmp_path: Path) -> None:
    """nn.MultiheadAttention computes its weights by hand when asked for them (need_weights=True, the default)."""
    x = torch.randn(2, 64, 32)

    def model(need_weights: bool) -> nn.Module:
        attn = nn.MultiheadAttention(32, 4, batch_first=True)

        class Wrap(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.attn = attn

            def forward(self, h: torch.Tensor) -> torch.Tensor:
                return self.attn(h, h, h, need_weights=need_weights)[0]

        return Wrap()

    assert record(tmp_path, training_step(model(True), x)).facts["attention.unfused_per_step"] == 1
    assert record(tmp_path, training_step(model(False), x)).facts["attention.unfused_per_step"] == 0


# elementwise chains --------------------------------------------------------------------------------
def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Mlp(nn.Module):
    def __init__(self, builtin: bool) -> None:
        super().__init__()
        self.up, self.down, self.builtin = nn.Linear(64, 256), nn.Linear(256, 64), builtin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(x)
        return x + self.down(F.gelu(h, approximate="tanh") if self.builtin else gelu_tanh(h))


def test_hand_written_gelu_is_an_elementwise_chain(tmp_path: Path) -> None:
    x = torch.randn(256, 64)
    slow = record(tmp_path, training_step(nn.Sequential(Mlp(False), Mlp(False)), x))
    f = slow.facts
    assert f["elementwise.chains_per_step"] == 2 and f["elementwise.max_ops"] == 8
    chain = f["elementwise.chains"][0]
    assert chain["function"] == "gelu_tanh" and chain["top_ops"] == "mul pow mul add mul tanh add mul"
    assert f["elementwise.forward_ms"] < f["elementwise.ms"]  # backward nodes are counted too
    # one fused op forward and one backward cost less than the eight of each they replace (the forward alone
    # may not be more than the dearest op's forward and backward: a timing, flaky on a busy machine)
    assert 0 < f["elementwise.fused_ms"] < f["elementwise.ms"]
    fixed = record(tmp_path, training_step(nn.Sequential(Mlp(True), Mlp(True)), x))
    assert fixed.facts["elementwise.chains_per_step"] == 0 and "CPU004" not in fixed.fired


def test_a_plain_model_and_loss_make_no_chain(tmp_path: Path) -> None:
    model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.LayerNorm(128), nn.Linear(128, 10))
    x, y = torch.randn(64, 64), torch.randint(0, 10, (64,))
    optimizer = torch.optim.Adam(model.parameters())

    def step() -> None:
        loss = F.cross_entropy(model(x), y) + 1e-4 * sum(p.pow(2).sum() for p in model.parameters())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    rec = record(tmp_path, step)
    assert rec.facts["elementwise.chains_per_step"] == 0
    assert not rec.fired, list(rec.fired)


# torch.compile -------------------------------------------------------------------------------------
class Block(nn.Module):
    def __init__(self, check: bool) -> None:
        super().__init__()
        self.fc, self.check = nn.Linear(32, 32), check

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc(x))
        if self.check and h.max().item() > 1e6:  # a graph break
            h = h / 2
        return x + h


def compiled_step(check: bool) -> Callable[[], None]:
    torch._dynamo.reset()
    # aot_eager: the same regions, graphs and guards as Inductor, without its code generation (seconds)
    model = torch.compile(nn.Sequential(*[Block(check) for _ in range(3)]), backend="aot_eager")
    return training_step(model, torch.randn(8, 32))


def test_graph_breaks_in_a_compiled_model(tmp_path: Path) -> None:
    broken = record(tmp_path, compiled_step(check=True), labels=False)
    f = broken.facts
    assert f["compile.regions_per_step"] == 1
    assert f["compile.graphs_per_step"] == 6 and f["compile.breaks_per_step"] == 5  # two graphs per block
    assert f["compile.overhead_ms"] > 0 and f["compile.eager_ms"] > 0  # the .item() calls run eagerly
    # the extra graphs' AOT wrappers, forward and backward, at most their share (5 of 6) of the wrappers' time
    assert 0 < f["compile.graph_wrapper_ms"] < f["steps.time_ms"]
    assert f["compile.break_ms"] == pytest.approx(f["compile.eager_ms"] + f["compile.overhead_ms"]
                                                  + f["compile.graph_wrapper_ms"])
    assert f["compile.compiles_per_step"] == 0 and f["compile.labels_traced"] is False
    whole = record(tmp_path, compiled_step(check=False), labels=False).facts
    assert (whole["compile.graphs_per_step"], whole["compile.breaks_per_step"], whole["compile.break_ms"]) == (1, 0, 0)


def test_recompiles_in_steady_state(tmp_path: Path) -> None:
    torch._dynamo.reset()
    model = torch.compile(nn.Sequential(nn.Linear(16, 16), nn.ReLU()), backend="aot_eager", dynamic=False)
    sizes = iter(range(2, 100))
    step = training_step(model, torch.randn(1, 16))

    def new_shape_each_step() -> None:
        x = torch.randn(next(sizes), 16)
        model(x).sum().backward()

    del step
    rec = record(tmp_path, new_shape_each_step, labels=False)
    f = rec.facts
    assert f["compile.recompiles_per_step"] == 1 and f["compile.max_compile_id"] >= 3
    assert f["compile.recompile_ms"] > 0 and f["compile.recompile_share"] > 0.5
    assert "CMP002" in rec.fired
    assert rec.fired["CMP002"]["impact_ms"] == pytest.approx(f["compile.recompile_ms"])


def test_module_labels_traced_into_the_graph_are_recognised(tmp_path: Path) -> None:
    """A forward hook that opens a profiler range, as a collector's module labels do, breaks every graph."""
    from torch.nn.modules import module as nn_module

    fast = torch._C._profiler._RecordFunctionFast
    open_ranges: list = []

    def pre(module: nn.Module, args: object) -> None:
        rng = fast(f"advisor::module {type(module).__name__}")
        rng.__enter__()
        open_ranges.append(rng)

    def post(module: nn.Module, args: object, out: object) -> None:
        open_ranges.pop().__exit__(None, None, None)

    handles = [nn_module.register_module_forward_pre_hook(pre), nn_module.register_module_forward_hook(post)]
    try:
        rec = record(tmp_path, compiled_step(check=False), labels=False)
    finally:
        for h in handles:
            h.remove()
    f = rec.facts
    assert f["compile.labels_traced"] is True and f["compile.breaks_per_step"] > 0
    assert "CMP001" not in rec.fired and "CMP002" not in rec.fired
