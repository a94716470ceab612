"""`advisor diagnose` on a family of per-row Python loops (tests/cli/loops/row_loops.py) and their near-misses.

The same per-row body (a Linear on the row, then tanh and sigmoid arithmetic, five operators a row) written
three ways must each be diagnosed by CPU001 at the loop's header: spread over three lines of a model's forward,
in a helper the loop calls per row, and in a comprehension. The batched twin, a loop over a few big Linear layers
(``for layer in self.layers``), and the batched model called in a loop of two micro-batches must not be.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from conftest import RunOutput, run_cli

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parent / "loops" / "row_loops.py"
# form -> the text of the loop's header line, or None for a form that must stay quiet
FORMS = {
    "forward": "for i in range(x.shape[0]):",
    "helper": "rows.append(row_unit(self.lin, x[i]))",
    "comprehension": "y = torch.stack([row_unit(self.lin, r) for r in x])",
    "batched": None,
    "layers": None,
    "microbatch": None,
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunOutput]:
    base = tmp_path_factory.mktemp("loops")
    out: dict[str, RunOutput] = {}
    for form in FORMS:
        start = time.monotonic()
        cli = run_cli("diagnose", str(SCRIPT), "--out", str(base / form), "--no-escalate", "--no-trial", "--", "--form", form,
                      cwd=base, env={"OMP_NUM_THREADS": "1"})
        out[form] = RunOutput(base / form, cli, time.monotonic() - start)
    return out


def _header(marker: str) -> int:
    lines = SCRIPT.read_text().splitlines()
    at = next(i for i, line in enumerate(lines, 1) if marker in line)
    # the helper form's marker is the loop's body: its header is the `for` above it
    return at - 1 if not lines[at - 1].lstrip().startswith(("for ", "y = ")) else at


@pytest.mark.parametrize("form", [f for f, marker in FORMS.items() if marker])
def test_a_per_row_loop_is_diagnosed_at_its_header(runs, form: str) -> None:
    run = runs[form]
    assert run.cli.code == 0, run.cli.output
    found = {d["rule_id"]: d for d in run.diagnoses}
    assert "CPU001" in found, [d["rule_id"] for d in run.diagnoses]
    diagnosis = found["CPU001"]
    header, busiest = [part.strip() for part in diagnosis["where"].split(";")]
    assert header.startswith(f"row_loops.py:{_header(FORMS[form])} "), diagnosis["where"]
    assert 0 < diagnosis["impact_ms"] < run.facts["steps.time_ms"]
    loop = run.facts["lines.loops"][0]
    assert loop["iterations"] == 64 and 4 <= loop["ops_per_iteration"] <= 5.1, loop
    if form != "forward":  # the body's calls are on the helper's lines
        assert busiest.startswith("row_loops.py:") and busiest.endswith("(row_unit)"), busiest


@pytest.mark.parametrize("form", [f for f, marker in FORMS.items() if not marker])
def test_near_misses_are_not_diagnosed(runs, form: str) -> None:
    run = runs[form]
    assert run.cli.code == 0, run.cli.output
    assert "CPU001" not in {d["rule_id"] for d in run.diagnoses}, run.diagnoses
