"""The console script pauses the cyclic garbage collector while a command imports, and only there.

``advisor analyze`` spent 40-70 ms of a fixture trace's half second collecting the objects its imports make
(advisor.cli.app.imports_done). The console script must collect again once the command's modules are in, with
the imported objects frozen; in-process callers of ``run()`` keep their collector as it is.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys

from conftest import fixture_path

from advisor.cli.app import imports_done, run


def _probe(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_analyze_in_the_console_script_collects_again_after_its_imports(tmp_path) -> None:
    """``main()`` as the console script runs it, on a fixture trace: the collector is on again when the work
    runs, the imported modules are frozen, and the few collections left walk only what the work made."""
    trace = fixture_path("kineto", "a100_ddp_nccl_rank0.pt.trace.json.gz")
    code = f"""
import atexit, gc, json, sys, time
seen = {{"full": 0, "collections": 0, "ms": 0.0}}
started = [0.0]
def count(phase, info):
    if phase == "start":
        started[0] = time.perf_counter()
        return
    seen["collections"] += 1
    seen["full"] += info["generation"] == 2
    seen["ms"] += (time.perf_counter() - started[0]) * 1e3
gc.callbacks.append(count)
def report():
    seen.update(enabled=gc.isenabled(), frozen=gc.get_freeze_count())
    print(json.dumps(seen))
atexit.register(report)
sys.argv = ["advisor", "analyze", {str(trace)!r}, "--out", {str(tmp_path / "run")!r}, "-q"]
from advisor.cli import main
main()
"""
    seen = _probe(code)
    assert (tmp_path / "run" / "report.md").is_file()
    assert seen["enabled"], "the console script left the collector off after its imports"
    assert seen["frozen"] > 100_000, seen  # pandas, numpy and the analysis: hundreds of thousands of objects
    assert seen["full"] == 0, seen  # before this change, one full collection walked every imported object


def test_run_in_process_leaves_the_collector_alone() -> None:
    """The tests and the fuzz harness call ``run()``: no pause, nothing frozen."""
    frozen = gc.get_freeze_count()
    assert gc.isenabled()
    assert run(["rules", "list"]) == 0
    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen
    imports_done()  # not paused by main(): a no-op
    assert gc.get_freeze_count() == frozen
