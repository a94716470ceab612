"""Shared test fixtures.

Real inputs come from ``../shared/fixtures`` (GPU traces recorded by others on
real hardware). Where that folder is absent (a user's own clone) those tests
skip with the reason; under ``CI=true`` a missing fixture is a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
FIXTURES = REPO.parent / "shared" / "fixtures"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Tests run side by side (pytest -n): one intra-op thread for this worker and the scripts it diagnoses, as
    # tests/frameworks does. Two workers with a thread per core each would put every parallel operator at a
    # barrier waiting for a descheduled thread, and the steps would time the machine, not the code under test.
    # Scripts that set their own threads (examples/thread_oversubscription.py) still do.
    os.environ.setdefault("OMP_NUM_THREADS", "1")

try:  # torch.compile shows tqdm bars, and tqdm's monitor thread would outlive the test that compiled: the loader
    # and the analysis fork only while this process has no other thread (advisor.forked), so every later test of
    # that in the same process would run without its child (plain `pytest -q`: tests/analyze, then tests/load)
    import tqdm

    tqdm.tqdm.monitor_interval = 0
except ImportError:
    pass


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Beside another worker, tests that need every core are skipped, never run on half a machine: two ranks
    sharing two cores with a third process time the contention, and their rules' thresholds flip by chance.
    README's test command runs them after, on their own (``pytest -m whole_machine``)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    skip = pytest.mark.skip(reason="needs every core to itself; run apart with: pytest -q -m whole_machine")
    for item in items:
        if item.get_closest_marker("whole_machine"):
            item.add_marker(skip)


def fixture_path(*parts: str) -> Path:
    """A file under ../shared/fixtures, or skip (fail in CI) when it is absent."""
    path = FIXTURES.joinpath(*parts)
    if not path.exists():
        message = f"fixture {path} is missing (../shared/fixtures is not next to this checkout)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return path


KINETO_TRACES = [
    "a100_alexnet_cuda_sync.pt.trace.json.gz",
    "a100_ddp_nccl_rank0.pt.trace.json.gz",
    "cpu_only_gloo_rank34.pt.trace.json.gz",
    "mi250_rocm_minitoy.pt.trace.json.gz",
    "no_distributed_info.pt.trace.json.gz",
    "v100_resnet_single_rank.pt.trace.json.gz",
    "a100_recsys_2of128_ranks/rank0.pt.trace.json.gz",
    "a100_recsys_2of128_ranks/rank1.pt.trace.json.gz",
]


@pytest.fixture(scope="session", autouse=True)
def _own_yaml_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The tests and the CLI processes they start share a cache of parsed rule files, not the user's."""
    os.environ.setdefault("ADVISOR_CACHE_DIR", str(tmp_path_factory.mktemp("advisor-cache")))


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def run_cli(*args: str, cwd: Path, timeout: float = 300, env: dict[str, str] | None = None) -> CliResult:
    """Run the installed ``advisor`` CLI in a subprocess, as a user would."""
    full_env = {**os.environ, "COLUMNS": "120", **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "advisor", *args], cwd=cwd, capture_output=True, text=True,
        timeout=timeout, env=full_env,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


@dataclass
class RunOutput:
    path: Path
    cli: CliResult
    wall_s: float

    def json(self, name: str) -> dict:
        return json.loads((self.path / name).read_text())

    @property
    def facts(self) -> dict:
        return {f["name"]: f["value"] for f in self.json("findings.json")["facts"]}

    @property
    def diagnoses(self) -> list[dict]:
        return self.json("diagnoses.json")["diagnoses"]


class ExampleRuns(Mapping):
    """The bundled examples, each diagnosed on first use, once per test process (a pytest-xdist worker runs only
    the ones its tests read)."""

    NAMES = ("slow_dataloader", "slow_optimizer", "python_loop", "healthy")

    def __init__(self, base: Path) -> None:
        self.base = base
        self._runs: dict[str, RunOutput] = {}

    def __getitem__(self, name: str) -> RunOutput:
        if name not in self.NAMES:
            raise KeyError(name)
        if name not in self._runs:
            import time

            run_dir = self.base / name
            start = time.monotonic()
            # --no-escalate: these runs test the framework stage; the Nsight Systems stage has its own
            # tests (tests/workflow/test_nsys_end_to_end.py), and would add a minute per escalating example.
            cli = run_cli("diagnose", str(EXAMPLES / f"{name}.py"), "--out", str(run_dir), "--no-escalate", "--no-trial",
                          cwd=self.base)
            self._runs[name] = RunOutput(run_dir, cli, time.monotonic() - start)
        return self._runs[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.NAMES)

    def __len__(self) -> int:
        return len(self.NAMES)


@pytest.fixture(scope="session")
def diagnosed_examples(tmp_path_factory: pytest.TempPathFactory) -> ExampleRuns:
    """Each bundled example diagnosed once, for all the tests that read the result."""
    return ExampleRuns(tmp_path_factory.mktemp("examples"))
