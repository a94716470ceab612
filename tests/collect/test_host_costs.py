"""The collector's host-cost probes: what they return, and that they leave the script's state alone."""

from __future__ import annotations

import torch

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
