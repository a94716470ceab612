"""Each trial knob in a real torch process: it changes what it says, and undoing it puts back what was set."""

from __future__ import annotations

import os

import pytest
import torch

from advisor.collect.trial_knobs import make_setting
from advisor.knobs import KNOBS


def _setting(name: str, optimizers: list | None = None):
    return make_setting(name, lambda: optimizers or [])


def test_every_knob_the_engine_knows_has_a_setting_in_the_collector() -> None:
    for name in KNOBS:
        assert _setting(name).name == name


@pytest.mark.skipif(len(os.sched_getaffinity(0)) > 8, reason="needs more threads than this machine's cores")
def test_intra_op_threads_are_cut_to_the_cores_and_put_back() -> None:
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(16)
        setting = _setting("intra_op_threads")
        assert setting.applies() is None
        setting.apply()
        assert torch.get_num_threads() == len(os.sched_getaffinity(0))
        setting.undo()
        assert torch.get_num_threads() == 16
        torch.set_num_threads(1)
        assert "no more than its share" in (_setting("intra_op_threads").applies() or "")
    finally:
        torch.set_num_threads(before)


def test_grad_mode_is_switched_off_and_back() -> None:
    setting = _setting("no_grad")
    assert torch.is_grad_enabled() and setting.applies() is None
    setting.apply()
    try:
        assert not torch.is_grad_enabled()
        assert not (torch.nn.Linear(2, 2)(torch.ones(1, 2))).requires_grad
    finally:
        setting.undo()
    assert torch.is_grad_enabled()


def test_anomaly_detection_is_switched_off_and_back_with_its_nan_check() -> None:
    real = torch.is_anomaly_enabled
    torch.autograd.set_detect_anomaly(True, check_nan=False)
    try:
        setting = _setting("anomaly_detection_off")
        setting.apply()
        assert not real()
        setting.undo()
        assert real() and torch.is_anomaly_enabled() and not torch.is_anomaly_check_nan_enabled()
    finally:
        torch.autograd.set_detect_anomaly(False)


@pytest.mark.filterwarnings("ignore:Anomaly Detection has been enabled")
def test_anomaly_detection_stays_off_inside_the_scripts_own_context_manager() -> None:
    real = torch.is_anomaly_enabled
    setting = _setting("anomaly_detection_off")
    setting.apply()
    try:
        with torch.autograd.detect_anomaly():  # a script that turns it on around every step
            assert not real() and torch.is_anomaly_enabled()  # off for torch; as asked, for the script
        assert not torch.is_anomaly_enabled()
    finally:
        setting.undo()
    assert torch.is_anomaly_enabled is real and not real()


@pytest.mark.parametrize("name, flags", [("optimizer_foreach", {"foreach": True}),
                                         ("optimizer_fused", {"fused": True, "foreach": False})])
def test_the_optimizer_flags_are_set_on_every_group_and_put_back(name: str, flags: dict) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    before = [{k: g.get(k) for k in flags} for g in opt.param_groups]

    def step() -> None:
        opt.zero_grad()
        model(torch.ones(3, 4)).sum().backward()
        opt.step()

    step()  # the state exists before the switch, as in a script's later steps
    setting = _setting(name, [opt])
    assert setting.applies() is None
    setting.apply()
    assert all(all(g[k] == v for k, v in flags.items()) for g in opt.param_groups)
    step()  # torch.optim reads the flags at each step: the switched optimizer still steps
    setting.undo()
    assert [{k: g.get(k) for k in flags} for g in opt.param_groups] == before
    step()
    assert "no torch.optim optimizer" in (_setting(name).applies() or "")


def test_zero_grad_says_when_the_script_zeroed_its_gradients_another_way() -> None:
    model = torch.nn.Linear(2, 1)
    setting = _setting("zero_grad_set_to_none")
    setting.apply()
    try:
        model(torch.ones(1, 2)).sum().backward()
        for p in model.parameters():  # by hand: no zero_grad call for the setting to change
            p.grad.zero_()
    finally:
        setting.undo()
    assert "zeroes its gradients another way" in (setting.no_effect() or "")


def test_zero_grad_releases_the_gradients_while_on() -> None:
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    setting = _setting("zero_grad_set_to_none")
    model(torch.ones(1, 2)).sum().backward()
    setting.apply()
    try:
        opt.zero_grad(set_to_none=False)
        assert model.weight.grad is None
    finally:
        setting.undo()
    assert setting.no_effect() is None  # the script's own call was changed
    model(torch.ones(1, 2)).sum().backward()
    opt.zero_grad(set_to_none=False)
    assert model.weight.grad is not None and not model.weight.grad.any()


@pytest.mark.parametrize("name", ["tf32", "cudnn_benchmark"])
def test_the_gpu_knobs_say_why_not_on_a_process_without_cuda(name: str) -> None:
    # recorded CPU behaviour only: this machine has no GPU (the GPU path of these knobs is untested here)
    assert not torch.cuda.is_initialized()
    assert _setting(name).applies() == "the script did not use a CUDA GPU"
