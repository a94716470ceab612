"""`advisor diagnose` on examples/inference_autograd.py: an inference loop left with autograd on is INF001, priced
in the recorded steps' time, and its fixed twin (`--inference-mode`) is not."""

from __future__ import annotations

import pytest

from conftest import EXAMPLES, RunOutput, run_cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunOutput]:
    base = tmp_path_factory.mktemp("inference")
    out = {}
    for kind, args in (("slow", []), ("fixed", ["--", "--inference-mode"])):
        cli = run_cli("diagnose", str(EXAMPLES / "inference_autograd.py"), "--out", str(base / kind), "--no-escalate", "--no-trial",
                      "--wait", "3", "--warmup", "2", "--active", "20", *args, cwd=base)
        out[kind] = RunOutput(base / kind, cli, 0.0)
    return out


def test_autograd_left_on_is_diagnosed_with_its_time_in_recorded_units(runs) -> None:
    run = runs["slow"]
    assert run.cli.code == 0, run.cli.output
    facts = run.facts
    assert facts["workload.kind"] == "inference" and facts["steps.method"] == "module"
    found = {d["rule_id"]: d for d in run.diagnoses}
    assert "INF001" in found, sorted(found)
    assert not {rule for rule in found if rule.startswith(("OPT", "DL"))}, sorted(found)
    assert "inference_mode" in found["INF001"]["fix"] + found["INF001"]["fix_code"]
    # the probe's price, measured without the profiler, is stretched as the recorded steps were
    bare, stretched = facts["workload.autograd_ms_unprofiled"], facts["workload.autograd_ms"]
    stretch = facts["steps.time_ms_median"] / facts["steps.unprofiled_ms"]
    assert stretched == pytest.approx(bare * max(stretch, 1.0))  # never shrunk (a slow tail on a busy machine)
    assert found["INF001"]["impact_ms"] == pytest.approx(stretched)
    assert 0 < stretched < facts["steps.time_ms"]
    # what grad mode adds to an op is a few microseconds on any CPU, nothing like a whole op's time
    assert 0 < facts["autograd.us_per_op"] < 50


def test_the_fixed_twin_records_no_autograd(runs) -> None:
    run = runs["fixed"]
    assert run.cli.code == 0, run.cli.output
    assert run.facts["workload.autograd_share"] == 0
    assert "INF001" not in {d["rule_id"] for d in run.diagnoses}
