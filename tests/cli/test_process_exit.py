"""The console script ends without tearing the interpreter down, yet keeps everything a normal exit keeps.

``advisor.cli.app.end_process`` runs the exit hooks, flushes the streams and calls ``os._exit``: the caches the
hooks save, the card on stdout and the exit code must all be as they were.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import fixture_path


def _advisor(*args: str, cwd: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "120", "ADVISOR_CACHE_DIR": str(cache)}
    return subprocess.run([sys.executable, "-m", "advisor", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=env)


def test_exit_hooks_run_and_output_is_flushed(tmp_path: Path) -> None:
    cache = tmp_path / "cache"  # empty: this run parses the rules and highlights the fix snippets afresh
    trace = fixture_path("kineto", "v100_resnet_single_rank.pt.trace.json.gz")
    proc = _advisor("analyze", str(trace), "--out", str(tmp_path / "run"), cwd=tmp_path, cache=cache)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.rstrip().endswith(str(tmp_path / "run" / "report.html"))  # the card's last line came out
    saved = {p.name.split("-py")[0] for p in cache.glob("*.marshal")}
    # every cache the run filled was written by its exit hook
    assert saved == {"yaml", "rules", "expressions", "gpu-specs", "highlight", "markdown"}


def test_exit_codes_are_kept(tmp_path: Path) -> None:
    missing = _advisor("analyze", str(tmp_path / "no-such.json"), cwd=tmp_path, cache=tmp_path / "cache")
    assert missing.returncode == 2 and "no such file" in missing.stderr
    assert _advisor("--version", cwd=tmp_path, cache=tmp_path / "cache").returncode == 0
