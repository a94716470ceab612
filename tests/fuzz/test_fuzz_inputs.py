"""Fuzz: damaged copies of real profiler outputs never get a traceback, a hang, a lie or a stray file (issue 19).

Every case is a real fixture file damaged by :mod:`mutate` (seeded, so a failure names the seed that repeats it)
and analysed by the real command line in this process (:mod:`harness`), which checks the promise on it.

By default (CI) the run is 250 cases, under a minute on one core (about 45 s): 185 Kineto traces (small real
traces and a slice of a big one), 32 Nsight Systems exports and 32 Nsight Compute CSVs, 1 in 50 of them also
writing the full reports (jinja2 and the charts). ``ADVISOR_FUZZ_CASES=N`` runs N cases in the same proportions, and
``ADVISOR_FUZZ_SEED=S`` starts from another seed (default 19). A case that fails is shown with its seed, what was
done to the file and what came out; ``ADVISOR_FUZZ_KEEP=DIR`` keeps the damaged files there.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import shutil
import time
from collections import Counter
from pathlib import Path

import pytest

from conftest import fixture_path
from harness import EXIT_BUG, analyze, check
from mutate import Case, kineto_case, kineto_slice, ncu_case, nsys_case

CASES = int(os.environ.get("ADVISOR_FUZZ_CASES", "250"))
SEED = int(os.environ.get("ADVISOR_FUZZ_SEED", "19"))
KEEP = os.environ.get("ADVISOR_FUZZ_KEEP")
#: share of the cases per format
SHARES = {"kineto": 0.74, "nsys": 0.13, "ncu": 0.13}
#: every this many cases also writes report.md and report.html
REPORT_EVERY = 50

KINETO = ["mi250_rocm_minitoy.pt.trace.json.gz", "cpu_only_gloo_rank34.pt.trace.json.gz",
          "a100_alexnet_cuda_sync.pt.trace.json.gz", "no_distributed_info.pt.trace.json.gz"]


def _kineto_bases() -> list[dict]:
    bases = [json.loads(gzip.decompress(fixture_path("kineto", name).read_bytes())) for name in KINETO]
    big = json.loads(gzip.decompress(fixture_path("kineto", "v100_resnet_single_rank.pt.trace.json.gz").read_bytes()))
    bases.append(kineto_slice(big, 600))  # the start of its first step: 600 CPU events and their GPU work
    return bases


def _run(fmt: str, make, count: int, tmp_path: Path) -> None:  # noqa: ANN001
    failures, bugs, started = [], [], time.monotonic()
    codes: Counter[int] = Counter()
    errors: Counter[str] = Counter()
    for n in range(count):
        seed = SEED * 100_000 + n
        rng = random.Random(seed)
        work = tmp_path / f"{fmt}-{n}"
        (work / "in").mkdir(parents=True)
        case = make(rng, work / "in")
        report = n % REPORT_EVERY == 0
        outcome = analyze(case, work, report=report)
        problems = check(outcome, report=report)
        codes[outcome.code] += 1
        if outcome.code:
            sentence = outcome.stderr.strip().replace(str(case.path), "FILE")
            errors[re.sub(r"\d+", "N", sentence)[:80]] += 1
        if problems:
            failures.append(f"seed {seed}: {'; '.join(problems)}\n{outcome.describe()}")
        elif outcome.code == EXIT_BUG:
            bugs.append(f"seed {seed}: {outcome.stderr.strip()[:300]}")
        if KEEP:
            shutil.copytree(work / "in", Path(KEEP) / f"{fmt}-{seed}", dirs_exist_ok=True)
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.monotonic() - started
    print(f"\n{fmt}: {count} cases in {elapsed:.0f} s, exit codes {dict(codes)}, {len(failures)} broke the promise, "
          f"{len(bugs)} analysis errors (one sentence, but a bug); the sentences: {errors.most_common(8)}")
    assert not failures, f"{len(failures)} of {count} cases broke the promise:\n\n" + "\n\n".join(failures[:5])
    assert not bugs, f"{len(bugs)} of {count} cases hit an analysis error (a bug in advisor):\n" + "\n".join(bugs[:10])


def _count(fmt: str) -> int:
    return max(1, round(CASES * SHARES[fmt]))


def test_damaged_kineto_traces(tmp_path: Path) -> None:
    bases = _kineto_bases()
    _run("kineto", lambda rng, folder: kineto_case(rng, rng.choice(bases), folder), _count("kineto"), tmp_path)


@pytest.mark.parametrize("name", ["vecadd_nsys2025.5.sqlite"])
def test_damaged_nsys_exports(tmp_path: Path, name: str) -> None:
    base = fixture_path("nsys", name)
    _run("nsys", lambda rng, folder: nsys_case(rng, base, folder), _count("nsys"), tmp_path)


def test_damaged_ncu_csvs(tmp_path: Path) -> None:
    bases = [fixture_path("ncu", n).read_text() for n in ("pytorch_ocr_kernel_details_ncu2025.csv",
                                                         "cublaslt_gemm_ncu_stdout.log")]
    _run("ncu", lambda rng, folder: ncu_case(rng, rng.choice(bases), folder), _count("ncu"), tmp_path)


def test_the_harness_sees_a_broken_promise(tmp_path: Path, monkeypatch) -> None:
    """The checks are not blind: a loader that raises a raw exception, and one that writes beside its input."""
    import advisor.load.kineto as kineto

    trace = tmp_path / "in" / "t.json.gz"
    trace.parent.mkdir()
    trace.write_bytes(fixture_path("kineto", KINETO[0]).read_bytes())

    def broken(path, **kwargs):  # noqa: ANN001, ANN003, ANN202
        (Path(path).parent / "stray.txt").write_text("x")
        raise KeyError("ts")

    monkeypatch.setattr(kineto, "load_kineto", broken)
    monkeypatch.setattr("advisor.pipeline.load_kineto", broken)
    outcome = analyze(Case(trace, ["broken loader"]), tmp_path / "work")
    problems = check(outcome)
    assert any("traceback" in p for p in problems), problems
    assert any("beside the input" in p and "stray.txt" in p for p in problems), problems
