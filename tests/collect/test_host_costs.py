"""The collector's host-cost probes: what they return, and that they leave the script's state alone."""

from __future__ import annotations

import torch

from advisor.collect import host_costs
from advisor.collect.host_costs import measure_host_costs


def test_every_kind_is_priced_and_the_block_sets_the_level() -> None:
    costs = measure_host_costs()
    kinds = costs["autograd_us_by_kind"]
    assert set(kinds) == {"matmul", "norm", "pointwise", "add"}
    assert all(v >= 0 for v in kinds.values())
    assert costs["autograd_block_us"] > 0  # recording a real forward always costs something
    assert costs["autograd_us"] == kinds["pointwise"]
    # a sum saves no input for backward: it records for less than an op that saves one
    assert kinds["add"] < max(kinds["matmul"], kinds["norm"], kinds["pointwise"])


def test_the_scripts_random_state_and_modes_are_left_as_they_were() -> None:
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    with torch.inference_mode():  # a step boundary inside the script's own inference_mode()
        costs = measure_host_costs()
        assert torch.is_inference_mode_enabled()
    assert costs["autograd_us_by_kind"]
    assert torch.equal(torch.rand(3), expected)
    assert torch.is_grad_enabled()


def _block_measures(monkeypatch, blocks: list[float]) -> list[int]:
    """The block probe (36 ops a call) measures grad mode adding each of ``blocks`` in turn; the chains as they are."""
    real = host_costs._alternating_us
    calls = []

    def alternating(fn, calls_per_round, ops):
        if ops != host_costs._DEPTH * sum(host_costs._BLOCK_KINDS.values()):
            return real(fn, calls_per_round, ops)
        calls.append(ops)
        return blocks[min(len(calls), len(blocks)) - 1], 10.0

    monkeypatch.setattr(host_costs, "_alternating_us", alternating)
    return calls


def test_a_block_that_measured_nothing_is_measured_again(monkeypatch) -> None:
    calls = _block_measures(monkeypatch, [0.0, -0.5, 6.0])
    costs = measure_host_costs()
    assert len(calls) == 3 and costs["autograd_block_us"] == 6.0
    assert all(v > 0 for k, v in costs["autograd_us_by_kind"].items() if k != "add")


def test_a_block_that_never_measures_leaves_the_chains_unscaled(monkeypatch) -> None:
    """Not a free autograd priced at 0: the chains' own figures, which gave the ratio between kinds, stand."""
    calls = _block_measures(monkeypatch, [0.0])
    costs = measure_host_costs()
    assert len(calls) == host_costs._BLOCK_TRIES
    assert costs["autograd_block_us"] == 0.0 and costs["autograd_block_scale"] == 1.0
    # the matrix product's recording is the dearest, so it measures above 0 even on a busy machine (the pointwise
    # chain's, less its seed op, came out at 0 in one run of three while a calibration ran beside it)
    assert costs["autograd_us_by_kind"]["matmul"] > 0
