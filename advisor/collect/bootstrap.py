"""The child side of the framework collector: runs the user's script as ``__main__``.

Started by :mod:`advisor.collect.framework` as ``python -c <stub> collector.json``.
It makes the process look like ``python script.py args`` (``sys.argv``,
``sys.path[0]``, ``__file__``, ``__name__``), attaches the step driver and
the labels, and runs the script. It never edits the script.

Outcomes, written to ``status.rank<R>.json`` beside the trace:

- ``captured``: the active steps were recorded; the script is stopped
  (``os._exit``) unless the config says to run to the end.
- ``completed`` / ``exited``: the script returned or called ``sys.exit``.
- ``error``: the script raised; its traceback is printed as Python would, and
  whatever the active window had recorded is saved.
- ``interrupted`` / ``timeout``: Ctrl-C, or SIGTERM from the parent's ``--timeout``.
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

# Imported before the script's directory replaces sys.path[0].
from advisor.collect.config import CollectorConfig
from advisor.collect.environment import describe_environment
from advisor.collect.labels import PhaseLabels
from advisor.collect.source_marker import SourceMarker
from advisor.collect.steps import KinetoBackend, NvtxBackend, StepDriver

__all__ = ["main"]


class Stopped(BaseException):
    """Raised in the main thread when the parent asks us to stop (``--timeout``)."""


def _rank() -> int:
    return int(os.environ.get("RANK", "0") or 0)


class Child:
    def __init__(self, config_path: str) -> None:
        self.cfg = CollectorConfig.read(Path(config_path))
        self.rank = _rank()
        self.out = Path(self.cfg.out_dir)
        self.trace_path = self.out / f"rank{self.rank}.pt.trace.json.gz"
        self.status_path = self.out / f"status.rank{self.rank}.json"
        self.started = time.time()
        self.driver: Any = None
        self.status: dict[str, Any] = {"rank": self.rank, "pid": os.getpid()}

    # setup -------------------------------------------------------------------------
    def attach(self) -> None:
        self.status["environment"] = describe_environment()
        backend: Any
        if self.cfg.mode == "kineto":
            backend = KinetoBackend(self.cfg, str(self.trace_path))
        else:
            backend = NvtxBackend()
        roots = [Path(r) for r in self.cfg.source_roots] or [Path(self.cfg.script).parent]
        labels = PhaseLabels(nvtx=True)
        marker = None
        if self.cfg.source_lines and self.cfg.mode == "kineto":
            # Inside data loading and the optimizer step, torch calls made by library
            # code belong to the phase's own call site, labelled by the phase hook.
            marker = SourceMarker(roots, direct_only=lambda: labels.current in ("dataloader", "optimizer"))
            labels.source = marker.caller_label
        self.driver = StepDriver(self.cfg, backend, labels, marker, self._captured)
        self.driver.attach()
        signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        raise Stopped()

    # outcomes ----------------------------------------------------------------------
    def _captured(self) -> None:
        """The last active step ended and the output is written."""
        if self.cfg.run_to_end:
            self._write_status("captured", None)
            return
        self.finish("captured", 0)

    def finish(self, outcome: str, exit_code: int, error: dict[str, Any] | None = None) -> None:
        saved = False
        if self.driver is not None and not self.driver.done:
            saved = self.driver.stop_early()
        if outcome == "captured" or saved:
            self.status["profile"] = "complete" if outcome == "captured" else "partial"
        self._write_status(outcome, exit_code, error)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(exit_code)

    def _write_status(self, outcome: str, exit_code: int | None, error: dict[str, Any] | None = None) -> None:
        d = self.driver
        self.status.update({
            "outcome": outcome,
            "exit_code": exit_code,
            "step_method": d.method if d else None,
            "steps_seen": d.step if d else 0,
            "state": d.state if d else None,
            "timings": {"wall_s": round(time.time() - self.started, 3), **(d.timings if d else {})},
            "trace": self.trace_path.name if self.trace_path.exists() else None,
        })
        self.status.setdefault("profile", "complete" if outcome == "captured" else (
            "partial" if self.trace_path.exists() else "none"))
        if error:
            self.status["error"] = error
        tmp = self.status_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.status, indent=2, default=str))
        tmp.replace(self.status_path)

    # running the script ------------------------------------------------------------
    def run(self) -> None:
        script = os.path.abspath(self.cfg.script)
        sys.argv = [self.cfg.script, *self.cfg.args]
        sys.path[0] = os.path.dirname(script)
        try:
            self.attach()
            runpy.run_path(script, run_name="__main__")
        except SystemExit as exc:
            code = exc.code
            if code is None:
                code = 0
            elif not isinstance(code, int):
                print(code, file=sys.stderr)
                code = 1
            self.finish("exited" if code == 0 else "error", code,
                        None if code == 0 else {"type": "SystemExit", "message": str(exc.code)})
        except KeyboardInterrupt:
            self.finish("interrupted", 130)
        except Stopped:
            self.finish("timeout", 124)
        except BaseException as exc:  # noqa: BLE001 - the user's exception, reported as Python would
            error = _describe(exc, script)
            _print_user_traceback(exc, script)
            self.finish("error", 1, error)
        else:
            self.finish("completed", 0)


def _user_frames(tb: Any, script: str) -> Any:
    """Drop the frames of this bootstrap and runpy, as ``python script.py`` would show none."""
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != script:
        tb = tb.tb_next
    return tb


def _print_user_traceback(exc: BaseException, script: str) -> None:
    tb = _user_frames(exc.__traceback__, script) or exc.__traceback__
    traceback.print_exception(type(exc), exc, tb, file=sys.stderr)


def _describe(exc: BaseException, script: str) -> dict[str, Any]:
    frames = traceback.extract_tb(exc.__traceback__)
    where = next((f for f in reversed(frames) if os.path.abspath(f.filename) == script), frames[-1] if frames else None)
    return {
        "type": type(exc).__name__,
        "message": str(exc),
        "file": where.filename if where else None,
        "line": where.lineno if where else None,
        "code": where.line if where else None,
    }


def main(config_path: str) -> None:
    Child(config_path).run()
