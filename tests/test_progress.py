"""The progress bar: silent off a terminal and for quick tasks; shown, then removed, for slow ones on a terminal."""

from __future__ import annotations

import io

from rich.console import Console

from advisor import progress
from advisor.load.kineto import load_kineto
from conftest import fixture_path


def test_silent_when_stderr_is_not_a_terminal(capsys) -> None:
    with progress.Progress("Loading", total=10, delay_s=0) as bar:
        bar.update(5)
    assert not bar.enabled
    assert capsys.readouterr().err == ""


def test_nothing_during_the_first_second() -> None:
    with progress.Progress("Loading", total=10, enabled=True) as bar:
        bar.update(5)
        assert bar._bar is None


def test_shown_on_a_terminal_for_a_slow_load(monkeypatch) -> None:
    """A real load drives the bar through the loader's callback; the bar ends at the file's size."""
    screen = io.StringIO()
    monkeypatch.setattr("rich.console.Console", lambda **kw: Console(file=screen, force_terminal=True, width=80))
    monkeypatch.setattr(progress, "_REFRESH_S", 0.0)
    path = fixture_path("kineto", "a100_ddp_nccl_rank0.pt.trace.json.gz")
    seen: list[tuple[int, int]] = []
    with progress.Progress("Loading trace", enabled=True, delay_s=0) as bar:
        def spy(done: int, total: int) -> None:
            seen.append((done, total))
            bar.update(done, total)

        load_kineto(path, on_progress=spy)
        assert bar._bar is not None
    assert seen[-1] == (path.stat().st_size, path.stat().st_size)
    assert "Loading trace" in screen.getvalue()
