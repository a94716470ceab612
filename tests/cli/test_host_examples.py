"""The host-configuration examples: each planted problem is the top diagnosis, and its fixed twin is quiet.

Every example runs twice under `advisor diagnose`, as written and with the argument that applies the fix
(the rows of examples/calibration.yaml), on first use, once for all the tests below. HOST001's example runs
two ranks that take every core, so its tests run apart from the others (the whole_machine marker).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import yaml

from conftest import EXAMPLES, RunOutput, run_cli

pytestmark = pytest.mark.slow

#: rule -> (example, the line of the planted problem, a word the fix must contain)
PLANTED = {
    "HOST001": ("thread_oversubscription.py", "torch.set_num_threads(max(1, cores // ranks_here)", "set_num_threads"),
    "HOST002": ("anomaly_detection.py", "torch.autograd.set_detect_anomaly(not args.no_anomaly)", "set_detect_anomaly"),
    "HOST003": ("checkpoint_every_step.py", "torch.save({", "less often"),
    "DL002": ("worker_restarts.py", "for ids, labels in loader:", "persistent_workers=True"),
}
SCHEDULE = ("--wait", "1", "--warmup", "1", "--active", "3")
#: HOST001 reads the longest wait of a probe the pool runs once a step: three probes can all miss the other
#: rank's threads (CI saw a longest wait of 0.12 ms once), eight rarely do
SCHEDULES = {"HOST001": ("--wait", "1", "--warmup", "1", "--active", "8")}


def _calibration() -> dict[str, dict]:
    rows = yaml.safe_load((EXAMPLES / "calibration.yaml").read_text())
    return {row["rule"]: row for row in rows if row["rule"] in PLANTED}


class PlantedRuns(Mapping):
    """(rule, "slow" | "fixed") -> the example's run, diagnosed on first use."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.rows = _calibration()
        self._runs: dict[tuple[str, str], RunOutput] = {}

    def __getitem__(self, key: tuple[str, str]) -> RunOutput:
        rule, twin = key
        if key not in self._runs:
            row = self.rows[rule]
            args = {"slow": [], "fixed": row["fixed_args"]}[twin]
            run_dir = self.base / f"{rule}-{twin}"
            start = time.monotonic()
            cli = run_cli("diagnose", str(EXAMPLES / row["example"]), "--out", str(run_dir), "--no-escalate", "--no-trial",
                          *SCHEDULES.get(rule, SCHEDULE), *row["diagnose_args"], *(("--", *args) if args else ()),
                          cwd=self.base)
            self._runs[key] = RunOutput(run_dir, cli, time.monotonic() - start)
        return self._runs[key]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter((rule, twin) for rule in self.rows for twin in ("slow", "fixed"))

    def __len__(self) -> int:
        return 2 * len(self.rows)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> PlantedRuns:
    return PlantedRuns(tmp_path_factory.mktemp("host-examples"))


#: HOST001's example runs two ranks with a thread per core each: it needs the machine to itself
RULES = [pytest.param(rule, marks=pytest.mark.whole_machine) if rule == "HOST001" else rule for rule in sorted(PLANTED)]


def test_every_example_has_a_calibration_row() -> None:
    assert {rule: row["example"] for rule, row in _calibration().items()} == {r: p[0] for r, p in PLANTED.items()}


def _line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


@pytest.mark.parametrize("rule", RULES)
def test_the_planted_problem_is_the_top_diagnosis(runs: dict, rule: str) -> None:
    run = runs[rule, "slow"]
    assert run.cli.code == 0, run.cli.output
    example, marker, fix_word = PLANTED[rule]
    top = run.diagnoses[0]
    assert top["rule_id"] == rule, [(d["rule_id"], d["impact_ms"]) for d in run.diagnoses]
    assert top["severity"] in ("medium", "high", "critical")
    assert top["impact_ms"] and 0 < top["impact_ms"] < run.facts["steps.time_ms"]
    assert fix_word in top["fix"] + top["fix_code"]
    planted = _line_of(EXAMPLES / example, marker)
    assert f"{example}:{planted}" in top["where"], top["where"]


@pytest.mark.parametrize("rule", RULES)
def test_the_fixed_twin_is_quiet(runs: dict, rule: str) -> None:
    run = runs[rule, "fixed"]
    assert run.cli.code == 0, run.cli.output
    assert rule not in [d["rule_id"] for d in run.diagnoses]


@pytest.mark.whole_machine
def test_thread_facts_of_two_ranks_with_every_core_each(runs: dict) -> None:
    slow, fixed = runs["HOST001", "slow"].facts, runs["HOST001", "fixed"].facts
    assert slow["host.local_ranks"] == 2 and slow["host.ranks_threads"] == 2 * slow["host.cores"]
    assert slow["host.demand_excess"] >= 1 and slow["host.parallel_region_ms"] >= 1
    assert slow["host.pool_waits_per_step"] > 0
    assert fixed["host.ranks_threads"] <= fixed["host.cores"] and "host.parallel_region_ms" not in fixed
    assert slow["host.threads_site"].startswith("thread_oversubscription.py:")


def test_anomaly_facts_count_the_graph(runs: dict) -> None:
    facts = runs["HOST002", "slow"].facts
    # 8 blocks of LayerNorm, two Linear layers with their transposes, GELU and the residual add, a head,
    # the loss, and one AccumulateGrad per parameter: the same graph every step
    assert facts["debug.anomaly_detection"] is True and facts["anomaly.nodes_per_step"] == 110
    assert 0 < facts["anomaly.nan_check_ms"] < facts["anomaly.ms"]
    assert runs["HOST002", "fixed"].facts["debug.anomaly_detection"] is False


def test_restart_and_checkpoint_facts(runs: dict) -> None:
    restarts = runs["DL002", "slow"].facts
    assert restarts["dataloader.worker_starts_per_step"] > 0 and restarts["host.dataloader_workers"] == 2
    # four batches an epoch: one restart or two in the five recorded steps, each costing what the steps show
    assert restarts["dataloader.worker_start_steps"] in (1, 2) and restarts["dataloader.worker_start_each_ms"] > 0
    assert "dataloader.worker_starts_per_step" not in runs["DL002", "fixed"].facts
    saves = runs["HOST003", "slow"].facts
    assert saves["checkpoint.saves_per_step"] == 1 and saves["checkpoint.longest_ms"] > 0
    assert saves["checkpoint.steps_with_save"] == saves["steps.count"]  # a save in every step: the rate is seen
    assert "checkpoint.ms" not in runs["HOST003", "fixed"].facts


def test_the_run_metadata_records_what_the_collector_saw(runs: dict) -> None:
    meta = runs["HOST002", "slow"].json("run.json")
    at = meta["threads_at_capture"]
    assert at["usable_cores"] >= 1 and at["debug"]["anomaly_detection"] is True
    assert at["anomaly_on_at"][0].endswith("anomaly_detection.py")
    workers = runs["DL002", "slow"].json("run.json")["environment"]["threads"]
    assert workers["workers_measured_s"] > 0 and workers["workers_busy_cores"] >= 0


def test_no_host_rule_fires_on_the_other_examples(diagnosed_examples) -> None:  # noqa: ANN001
    for name, run in diagnosed_examples.items():
        fired = {d["rule_id"] for d in run.diagnoses}
        assert not fired & {"HOST001", "HOST002", "HOST003", "DL002"}, (name, fired)
        assert run.facts["host.cores"] >= 1
