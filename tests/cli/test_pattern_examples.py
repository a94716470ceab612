"""`advisor diagnose` on the trace-pattern examples and their fixed twins.

Each example plants one pattern (examples/calibration.yaml lists them with the arguments of the fixed
twin): the slow run must be diagnosed with its rule, pointing at the planted line, and the fixed run,
which applies exactly the rule's advice, must not be. No other trace-pattern rule may fire on either
run. Short schedules keep each run to a few seconds of profiling.
"""

from __future__ import annotations

import os
import time

import pytest

from conftest import EXAMPLES, RunOutput, run_cli

#: glibc with both thresholds fixed keeps freed memory in the process: OPT002 fires on a CPU only then
KEEP_FREED_MEMORY = {"MALLOC_TRIM_THRESHOLD_": "1000000000", "MALLOC_MMAP_THRESHOLD_": "100000000"}

pytestmark = pytest.mark.slow

PATTERN_RULES = {"CPU002", "CPU003", "CPU004", "OPT002", "CMP001", "CMP002"}
# example -> (rule, fix arguments, a text on the planted line, a word the fix must contain)
PLANTED = {
    "strided_copies": ("CPU002", ["--keep-layout"], "h = h.transpose(1, 2).contiguous()", "layout"),
    "zeroed_grads": ("OPT002", ["--set-to-none"], "optimizer.zero_grad(set_to_none=args.set_to_none)", "set_to_none=True"),
    "unfused_gelu": ("CPU004", ["--builtin"], "return 0.5 * x * (1.0 + torch.tanh(", "F.gelu"),
    "manual_attention": ("CPU003", ["--sdpa"], "y = torch.softmax(scores, dim=-1) @ v", "scaled_dot_product_attention"),
}

# the environment an example is run with (examples/calibration.yaml gives its rows the same)
ENV = {"zeroed_grads": KEEP_FREED_MEMORY}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], RunOutput]:
    base = tmp_path_factory.mktemp("patterns")
    out: dict[tuple[str, str], RunOutput] = {}
    for name, (_, fix, _, _) in PLANTED.items():
        for kind, args in (("slow", []), ("fixed", ["--", *fix])):
            run_dir = base / f"{name}-{kind}"
            start = time.monotonic()
            cli = run_cli("diagnose", str(EXAMPLES / f"{name}.py"), "--out", str(run_dir), "--no-escalate", "--no-trial",
                          "--wait", "1", "--warmup", "1", "--active", "3", *args, cwd=base, env=ENV.get(name))
            out[(name, kind)] = RunOutput(run_dir, cli, time.monotonic() - start)
    return out


def _lines(where: str, file: str) -> list[int]:
    return [int(part.strip().split(":")[1].split()[0]) for part in where.split(";") if part.strip().startswith(file)]


@pytest.mark.parametrize("example", sorted(PLANTED))
def test_planted_pattern_is_diagnosed_at_its_line(runs, example: str) -> None:
    rule_id, _, marker, fix_word = PLANTED[example]
    run = runs[(example, "slow")]
    assert run.cli.code == 0, run.cli.output
    found = {d["rule_id"]: d for d in run.diagnoses}
    assert rule_id in found, [d["rule_id"] for d in run.diagnoses]
    assert set(found) & PATTERN_RULES == {rule_id}, sorted(found)
    diagnosis = found[rule_id]
    assert diagnosis["impact_ms"] and 0 < diagnosis["impact_ms"] < run.facts["steps.time_ms"]
    assert fix_word in diagnosis["fix"] + diagnosis["fix_code"]
    planted = {i for i, line in enumerate((EXAMPLES / f"{example}.py").read_text().splitlines(), 1) if marker in line}
    assert planted & set(_lines(diagnosis["where"], f"{example}.py")), (diagnosis["where"], planted)


@pytest.mark.parametrize("example", sorted(PLANTED))
def test_fixed_twin_is_not_diagnosed(runs, example: str) -> None:
    run = runs[(example, "fixed")]
    assert run.cli.code == 0, run.cli.output
    assert not {d["rule_id"] for d in run.diagnoses} & PATTERN_RULES, [d["rule_id"] for d in run.diagnoses]
    assert run.facts["steps.count"] == 3


def test_layout_copies_are_priced_by_the_collectors_copy_probe(runs) -> None:
    # Every copy of examples/strided_copies.py is a 1 MiB fp32 tensor whose innermost dimension is strided (the
    # transposes of (256, 16, 64) and (256, 64, 16)): each is priced at the probe's "gather" point of 1 MiB.
    run = runs[("strided_copies", "slow")]
    probe = run.json("run.json")["host_costs"]["copy_us"]
    assert [b for b, _ in probe["gather"]] == [16 << 10, 256 << 10, 1 << 20, 4 << 20]
    one_mib = dict(map(tuple, probe["gather"]))[1 << 20]
    f = run.facts
    assert f["layout_copies.priced_ms_unprofiled"] == pytest.approx(f["layout_copies.calls_per_step"] * one_mib / 1e3)
    stretch = f["steps.time_ms_median"] / f["steps.unprofiled_ms"]
    assert f["layout_copies.priced_ms"] == pytest.approx(f["layout_copies.priced_ms_unprofiled"] * max(stretch, 1.0))
    diagnosis = next(d for d in run.diagnoses if d["rule_id"] == "CPU002")
    assert diagnosis["impact_ms"] == pytest.approx(f["layout_copies.priced_ms"])
    assert "without the profiler" in diagnosis["what"]


def test_healthy_control_has_no_pattern(diagnosed_examples) -> None:
    run = diagnosed_examples["healthy"]
    assert not {d["rule_id"] for d in run.diagnoses} & PATTERN_RULES
    facts = run.facts
    assert facts["layout_copies.share"] < 0.02 and facts["attention.unfused_per_step"] == 0
    assert facts["zero_grad.calls_per_step"] == 0
    assert facts["elementwise.chains_per_step"] == 0 and "compile.regions_per_step" not in facts


def test_zeroing_is_not_diagnosed_on_a_cpu_whose_allocator_gives_freed_memory_back(runs, tmp_path) -> None:
    # With glibc's defaults, set_to_none=True made examples/zeroed_grads.py slower (36-40 ms a step against
    # 25-30): the advice would cost time, so OPT002 stays quiet, and says why through the allocator facts.
    if any(os.environ.get(k) for k in KEEP_FREED_MEMORY) or "GLIBC_TUNABLES" in os.environ:
        pytest.skip("this test process keeps freed memory itself (MALLOC_* or GLIBC_TUNABLES is set)")
    run_dir = tmp_path / "zeroed-grads-glibc-defaults"
    cli = run_cli("diagnose", str(EXAMPLES / "zeroed_grads.py"), "--out", str(run_dir), "--no-escalate", "--no-trial",
                  "--wait", "1", "--warmup", "1", "--active", "3", cwd=tmp_path)
    assert cli.code == 0, cli.output
    run = RunOutput(run_dir, cli, 0.0)
    assert run.facts["zero_grad.share"] >= 0.04, run.facts["zero_grad.share"]  # the zeroing is there
    assert run.facts["host.allocator"] == "glibc" and run.facts["host.allocator_keeps_memory"] is False
    assert "OPT002" not in {d["rule_id"] for d in run.diagnoses}
    # pinned below glibc's highest block, which its dynamic trim threshold would otherwise hand back at once
    assert run.facts["steps.heap_headroom_bytes"] >= 64 * 2**20, run.facts.get("steps.heap_headroom_bytes")
    kept = runs[("zeroed_grads", "slow")].facts
    assert kept["host.allocator_keeps_memory"] is True, kept["host.allocator_text"]


def test_the_window_gets_resident_heap_where_glibc_keeps_freed_memory(runs) -> None:
    # Without the headroom, one run in two of this example faulted in its six 4 MB gradient temporaries afresh
    # in every recorded step (24 MB, the step 20 -> 31-37 ms); with it, no recorded step faulted in 12 runs.
    for kind in ("slow", "fixed"):
        facts = runs[("zeroed_grads", kind)].facts
        assert facts["steps.heap_headroom_bytes"] >= 64 * 2**20, facts.get("steps.heap_headroom_bytes")
        assert facts["steps.window_fault_bytes"] < 4 * 2**20, facts["steps.window_fault_bytes"]
        assert "steps.unprofiled_fault_bytes" in facts
