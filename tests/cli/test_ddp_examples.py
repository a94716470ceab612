"""The planted multi-rank examples, each run with two gloo ranks next to its fixed twin.

Each example takes the flag that applies exactly the advice of its rule (see examples/calibration.yaml):
the rule fires on the slow run, its estimate follows from that run's trace, and it stays quiet on the
fixed one. Runs are short (a few profiled steps); bench/calibrate.py measures the gains on longer ones.
"""

from __future__ import annotations

import pytest

from conftest import EXAMPLES, RunOutput, run_cli

SHORT = ("--no-escalate", "-q", "--nproc-per-node", "2", "--wait", "1", "--warmup", "1", "--active", "3")


@pytest.fixture(scope="module")
def ddp_runs(tmp_path_factory: pytest.TempPathFactory):
    cache: dict[tuple[str, ...], RunOutput] = {}

    def run(example: str, *script_args: str) -> RunOutput:
        key = (example, *script_args)
        if key not in cache:
            out = tmp_path_factory.mktemp("ddp") / "run"
            args = ["diagnose", str(EXAMPLES / example), *SHORT, "--out", str(out)]
            cli = run_cli(*args, *(("--", *script_args) if script_args else ()), cwd=out.parent, timeout=600)
            assert cli.code == 0, cli.stdout + cli.stderr
            cache[key] = RunOutput(out, cli, 0.0)
        return cache[key]

    return run


def test_gradient_accumulation_without_no_sync(ddp_runs) -> None:
    slow = ddp_runs("ddp_grad_accumulation.py", "--steps", "8")
    f = slow.facts
    assert f["ddp.micro_batches_per_step"] == 4 and f["ddp.synced_micro_batches_per_step"] == 4
    assert f["ddp.grad_allreduces_per_step"] >= 4 and f["ddp.time_basis"] == "host collectives"
    diagnosis = next(d for d in slow.diagnoses if d["rule_id"] == "DIST002")
    # three of the four rounds of all-reduces go away
    assert diagnosis["impact_ms"] == pytest.approx(f["ddp.grad_allreduce_ms"] * 3 / 4, rel=1e-6)
    fixed = ddp_runs("ddp_grad_accumulation.py", "--steps", "8", "--no-sync")
    assert fixed.facts["ddp.micro_batches_per_step"] == 4 and fixed.facts["ddp.synced_micro_batches_per_step"] == 1
    assert "DIST002" not in {d["rule_id"] for d in fixed.diagnoses}
