"""When the user's script fails, the user sees their own traceback and one sentence about it (issue 19).

Each test runs a real script from ``scripts/`` under the real collector, in a subprocess, as a user would.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_cli

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).parent / "scripts"
#: a short schedule: these scripts fail in their first steps
SHORT = ("--wait", "1", "--warmup", "1", "--active", "3")


def _diagnose(tmp_path: Path, script: str):  # noqa: ANN202
    out = tmp_path / "run"
    cli = run_cli("diagnose", str(SCRIPTS / script), "--out", str(out), "--no-escalate", "--no-trial", *SHORT, cwd=tmp_path)
    return cli, out


def _advisor_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("advisor:")]


def _line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_syntax_error_names_the_scripts_line_and_gives_no_steps_advice(tmp_path: Path) -> None:
    """Case 6: the summary named advisor's own file ("(bootstrap.py:245)") and the card advised `--steps time`."""
    cli, out = _diagnose(tmp_path, "syntax_error.py")
    assert cli.code == 1
    # as `python syntax_error.py` prints it: the file and line, no frames, no traceback of the collector
    assert f'syntax_error.py", line 9\n    for step in range(10)\n' in cli.stderr
    assert "SyntaxError: expected ':'" in cli.stderr
    assert "Traceback" not in cli.stderr and "bootstrap.py" not in cli.output
    assert _advisor_lines(cli.stderr) == [
        f"advisor: the script raised SyntaxError: expected ':' (syntax_error.py:9), exit code 1; nothing was "
        f"profiled; see {out}"]
    assert "--steps" not in cli.output
    meta = json.loads((out / "run.json").read_text())
    assert meta["error"]["file"] == str(SCRIPTS / "syntax_error.py") and meta["error"]["line"] == 9
    assert "--steps" not in (out / "report.md").read_text()


def test_dataloader_worker_crash_is_one_sentence_with_the_traceback_kept(tmp_path: Path) -> None:
    """Case 7: the "one sentence" carried the worker's 15-line traceback with `[idx]` stripped as markup, and
    advisor's labels.py frame was in the user's traceback."""
    cli, out = _diagnose(tmp_path, "worker_crash.py")
    assert cli.code == 1
    raise_line = _line_of(SCRIPTS / "worker_crash.py", "shard = self.shards[i]")
    kept = out / "framework" / "worker_traceback.rank0.txt"
    assert _advisor_lines(cli.stderr) == [
        f"advisor: the script raised IndexError in DataLoader worker 0: list index out of range "
        f"(worker_crash.py:{raise_line}), exit code 1; the worker's traceback is in {kept}; the profile captured "
        f"until then is in {out}"]
    # the user's traceback, whole, as Python prints it: the worker's lines (with their `[idx]`), none of advisor's
    assert "data = [self.dataset[idx] for idx in possibly_batched_index]" in cli.stderr
    assert f'worker_crash.py", line {raise_line}, in __getitem__' in cli.stderr
    assert "/advisor/" not in cli.stderr.replace(str(out), "")  # no frame of advisor's code (labels.py, steps.py)
    text = kept.read_text()
    assert text.startswith("DataLoader worker process 0:\nTraceback (most recent call last):")
    assert f'worker_crash.py", line {raise_line}, in __getitem__' in text
    assert text.rstrip().endswith("IndexError: list index out of range")


def test_error_message_with_brackets_is_printed_as_it_is(tmp_path: Path) -> None:
    """Case 9: a script raising RuntimeError("... [/foo] ...") was a MarkupError traceback, and no card."""
    cli, out = _diagnose(tmp_path, "raise_markup.py")
    assert cli.code == 1, cli.output
    message = "checkpoint [/foo] is missing: tried ckpt[step] and [bold]ckpt[/bold]"
    assert f"RuntimeError: {message}\n" in cli.stderr  # the script's traceback
    line = _line_of(SCRIPTS / "raise_markup.py", "raise RuntimeError")
    assert any(f"raised RuntimeError: {message} (raise_markup.py:{line})" in ln for ln in _advisor_lines(cli.stderr))
    assert "MarkupError" not in cli.output
    assert "Report: " in cli.stdout and "advisor · raise_markup.py" in cli.stdout  # the card
    assert re.search(r"raised RuntimeError: checkpoint \[/foo\]", (out / "report.md").read_text().replace("\\", ""))


def test_workers_killed_at_the_hard_exit_are_not_a_script_error(tmp_path: Path) -> None:
    """torch's DataLoader installs a SIGCHLD handler that raises when a worker dies by a signal; the collector's
    own kill of the workers at its hard exit must not raise it (CI once saw a captured run turned into an error).
    Forty workers: without the fix the handler ran inside the kill loop in about one run of three here."""
    script = tmp_path / "hard_exit.py"
    script.write_text(
        "import multiprocessing, signal, time, types\n"
        "from advisor.collect.bootstrap import Child\n"
        "def raising(signum, frame):\n"
        "    raise RuntimeError('DataLoader worker is killed by signal: Killed.')\n"
        "signal.signal(signal.SIGCHLD, raising)\n"
        "workers = [multiprocessing.Process(target=time.sleep, args=(10,)) for _ in range(40)]\n"
        "for w in workers:\n"
        "    w.start()\n"
        "child = Child.__new__(Child)\n"
        "child.cfg = types.SimpleNamespace(mode='kineto')\n"
        "child._hard_exit(7)\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 7 and "RuntimeError" not in proc.stderr, proc.stderr
