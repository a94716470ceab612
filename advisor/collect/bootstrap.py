"""The child side of the framework collector: runs the user's script as ``__main__``.

Started by :mod:`advisor.collect.framework` as ``python -c <stub> collector.json``
(once per rank under torchrun), in the user's working directory. It makes
the process look like ``python script.py args``:

- ``sys.argv`` is ``[script as typed, *args]``; ``__file__`` is the script's
  path joined to the working directory, unnormalised, as CPython sets it;
  ``sys.path[0]`` is the script's real directory (symlinks resolved);
  ``__name__`` is ``"__main__"``;
- the advisor package, when the parent had to add it to ``PYTHONPATH``, is
  taken off ``sys.path`` and ``PYTHONPATH`` again before the script runs;
- CUDA is never initialised here (the script may still set
  ``CUDA_VISIBLE_DEVICES`` or fork).

It attaches the step driver and the labels, runs the script, and never edits
it. Outcomes, written to ``status.rank<R>.json`` beside the trace:

- ``captured``: the active steps were recorded; the script is stopped
  (unless the config says to run to the end).
- ``completed`` / ``exited``: the script returned, or called ``sys.exit(0)``.
- ``error``: the script raised (or exited non-zero); its traceback is printed
  as Python would, without the collector's frames (:mod:`.user_traceback`),
  and whatever the active window had recorded is saved.
- ``interrupted``: Ctrl-C (SIGINT, forwarded by the parent or by torchrun).
- ``stopped``: SIGTERM, from the parent's ``--timeout`` or from torchrun
  stopping the other ranks when one failed; the parent knows which.

When the script ended by itself (completed, exited, error) the interpreter
shuts down normally, so the script's ``atexit`` handlers and
multiprocessing joins run as they would. When the collector stops it
(captured, interrupted, stopped) it kills the script's multiprocessing
children (DataLoader workers) and exits at once; in ``nvtx`` mode through C
``exit()``, so that nsys and ncu flush the last NVTX ranges (``os._exit``
loses them).
"""

from __future__ import annotations

import builtins
import ctypes
import importlib.machinery
import json
import os
import runpy
import signal
import sys
import time
import tokenize
import types
import zipfile
from pathlib import Path
from typing import Any

# Imported before the script's directory replaces sys.path[0].
from advisor.collect.config import BOOTSTRAP_PATH_ENV, EXIT_INTERRUPTED, EXIT_STOPPED, CollectorConfig
from advisor.collect.environment import describe_environment
from advisor.collect import host_hooks
from advisor.collect.labels import PhaseLabels
from advisor.collect.source_marker import SourceMarker, library_roots
from advisor.collect.backends import KinetoBackend, NullBackend, NvtxBackend
from advisor.collect.steps import StepDriver
from advisor.collect.user_traceback import describe, print_user_traceback, worker_failure
from advisor.naming import SHAPES_DIR

__all__ = ["main"]



class Stopped(BaseException):
    """Raised in the main thread when SIGTERM asks the script to stop."""


def _rank() -> int:
    return int(os.environ.get("RANK", "0") or 0)


class Child:
    """One process running the script under the collector."""

    def __init__(self, config_path: str) -> None:
        self.cfg = CollectorConfig.read(Path(config_path))
        self.rank = _rank()
        self.pid = os.getpid()
        self.out = Path(self.cfg.out_dir)
        self.trace_path = self.out / f"rank{self.rank}.pt.trace.json.gz"
        self.status_path = self.out / f"status.rank{self.rank}.json"
        self.started = time.monotonic()
        self.driver: StepDriver | None = None
        self.status: dict[str, Any] = {"rank": self.rank, "pid": self.pid}
        self.script_start: float | None = None

    # setup -------------------------------------------------------------------------
    def attach(self, script_dir: str) -> None:
        backend: Any
        if self.cfg.mode == "kineto":
            backend = KinetoBackend(self.cfg, str(self.trace_path), str(self.out / SHAPES_DIR / self.trace_path.name))
        elif self.cfg.mode == "trial":
            backend = NullBackend()  # the trial times steps without any profiler (advisor.collect.trial_blocks)
        else:
            backend = NvtxBackend()
        roots = [Path(r) for r in self.cfg.source_roots] or [Path(script_dir)]
        labels = PhaseLabels(nvtx=True)
        marker = None
        if self.cfg.source_lines and self.cfg.mode == "kineto":
            # Inside data loading and the optimizer step, torch calls made by library
            # code belong to the phase's own call site, labelled by the phase hook.
            marker = SourceMarker(roots, direct_only=lambda: labels.current in ("dataloader", "optimizer"))
            labels.source = marker.caller_label
        self.driver = StepDriver(self.cfg, backend, labels, marker, self._captured, started=self.started)
        self.driver.attach()
        # torch.save and DataLoader worker start-up, named in the trace with the line that called them
        host_hooks.install(marker.caller_label if marker is not None else None)
        if self.cfg.mode in ("kineto", "trial"):
            # In nvtx mode the outer tool (nsys, ncu) owns stopping and saving; and Nsight
            # Systems 2022.4's OS-runtime tracing hangs at exit in a target that installs
            # signal handlers or changes its signal mask, so that mode touches neither.
            signal.signal(signal.SIGTERM, self._on_sigterm)
        # Noted at once, so the parent can find (and clean up after) a rank that dies without a word.
        self._save_status({**self.status, "outcome": "running"})

    def _forked(self) -> bool:
        """True in a process the script forked: it must behave as it would without us."""
        return os.getpid() != self.pid

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        if self._forked():  # a DataLoader worker or the script's own fork: die as by default
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        raise Stopped()

    # outcomes ----------------------------------------------------------------------
    def _captured(self) -> None:
        """The last active step ended and the output is written."""
        if self.cfg.run_to_end:
            self._write_status("captured", None)
            return
        self.finish("captured", 0, hard=True)

    def finish(self, outcome: str, exit_code: int, error: dict[str, Any] | None = None, *, hard: bool) -> None:
        """Save what was recorded, write the status, and end the process with ``exit_code``."""
        if self.cfg.mode in ("kineto", "trial"):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM now just ends us
        if self.driver is not None and not self.driver.done:
            self.driver.stop_early()
        self._write_status(outcome, exit_code, error)
        if hard:
            self._hard_exit(exit_code)
        raise SystemExit(exit_code)  # normal shutdown: the script's atexit handlers run

    def _hard_exit(self, code: int) -> None:
        import multiprocessing

        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        # The script is stopped mid-run: its DataLoader workers would otherwise
        # linger until they notice (up to 5 s), holding the tool's session open.
        # torch's SIGCHLD handler raises "DataLoader worker ... is killed by signal" in this thread when a worker
        # killed here dies, which once turned a captured run into a script error (CI): not ours to hear now.
        try:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        except (AttributeError, ValueError):  # no SIGCHLD (Windows), or not the main thread
            pass
        for child in multiprocessing.active_children():
            child.kill()
        if self.cfg.mode == "nvtx":
            ctypes.CDLL(None).exit(code)
        os._exit(code)

    def _write_status(self, outcome: str, exit_code: int | None, error: dict[str, Any] | None = None) -> None:
        d = self.driver
        self.status.update({
            "outcome": outcome,
            "exit_code": exit_code,
            "step_method": d.method if d else None,
            "steps_seen": d.step if d else 0,
            # the schedule as run: the user's, or fitted to long steps (advisor.collect.schedule_fit)
            "schedule": d.plan.as_json() if d else None,
            # where each step was a closure evaluation: the optimizer step's length and evaluations
            "closure_unit": d.closure_unit if d else None,
            # the loop found first and left for the training's (an evaluation before it), when one was
            "steps_skipped": d.skipped if d else None,
            "state": d.state if d else None,
            # seconds since the collector started in this process: the script, its first step, the window
            "timings": {"wall_s": round(time.monotonic() - self.started, 3), "script_start": self.script_start,
                        **(d.timings if d else {})},
            "trace": self.trace_path.name if self.trace_path.exists() else None,
            "environment": describe_environment(),
            "threads_at_capture": d.capture_threads if d else None,
            "host_costs": d.host_costs if d else None,
            # the DataLoader fetches timed while the labels were on: wall and CPU time (advisor.collect.labels)
            "dataloader_fetch": d.labels.fetch_times.as_json() if d and d.labels else None,
            # what a worker's hand-over of such a batch costs, where the loop fetched in process
            "dataloader_handover": d.dataloader_handover if d else None,
            # the steps after the window, timed without the profiler (see advisor.collect.steps)
            "unprofiled_step_ms": list(d.unprofiled_step_ms) if d else [],
            # page faults of those steps and of the recorded ones, and the heap headroom given to the window
            "heap": d.heap if d else None,
            # what the window recorded: none, partial (the script ended inside it) or complete
            "profile": d.recorded if d else "none",
            # the trial stage's run: the settings tried and each block's step times (advisor.collect.trial_blocks)
            **({"trial": d.trial.as_json()} if d and d.trial else {}),
        })
        if error:
            self.status["error"] = error
        self._save_status(self.status)

    def _save_status(self, status: dict[str, Any]) -> None:
        tmp = self.status_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(status, indent=2, default=str))
        tmp.replace(self.status_path)

    def _describe(self, exc: BaseException, script: str) -> dict[str, Any]:
        """The status's record of the error; a DataLoader worker's full traceback goes to a file beside it."""
        error = describe(exc, script, library_roots())
        worker = worker_failure(exc)
        if worker is not None:
            kept = self.out / f"worker_traceback.rank{self.rank}.txt"
            try:
                kept.write_text(f"DataLoader worker process {worker['worker']}:\n{worker['traceback']}\n")
                error["traceback_file"] = kept.name
            except OSError:
                pass  # the sentence still names the worker's line; the terminal showed the traceback
        return error

    # running the script ------------------------------------------------------------
    def run(self) -> None:
        given = self.cfg.script
        path = given if os.path.isabs(given) else os.path.join(os.getcwd(), given)
        script_dir = os.path.dirname(os.path.realpath(path))
        try:
            sys.argv = [given, *self.cfg.args]
            sys.path[0] = script_dir
            self.attach(script_dir)
            _forget_bootstrap_path()
            self.script_start = round(time.monotonic() - self.started, 6)
            _run_as_main(path)
        except SystemExit as exc:
            if self._forked():
                raise
            code, message = _exit_code(exc)
            error = None if code == 0 else {"type": "SystemExit", "message": message or str(code)}
            self.finish("exited" if code == 0 else "error", code, error, hard=False)
        except KeyboardInterrupt:
            if self._forked():
                raise
            self.finish("interrupted", EXIT_INTERRUPTED, hard=True)
        except Stopped:
            self.finish("stopped", EXIT_STOPPED, hard=True)
        except BaseException as exc:  # noqa: BLE001 - the user's exception, reported as Python would
            if self._forked():
                raise
            print_user_traceback(exc, path)
            self.finish("error", 1, self._describe(exc, path), hard=False)
        else:
            if self._forked():
                return
            self.finish("completed", 0, hard=False)


def _run_as_main(path: str) -> None:
    """Execute the script in a fresh ``__main__`` module, with the globals ``python script.py`` gives it.

    Not ``runpy.run_path``: it would set ``sys.argv[0]`` to the path and leave
    ``__loader__`` None, ``__package__`` "" and ``__builtins__`` a dict, unlike
    the interpreter. Zip applications and ``.pyc`` files still go through runpy.
    """
    if path.endswith((".pyc", ".pyz")) or zipfile.is_zipfile(path):
        runpy.run_path(path, run_name="__main__")
        return
    main = types.ModuleType("__main__")
    main.__dict__.update({
        "__file__": path, "__cached__": None, "__package__": None, "__spec__": None,
        "__loader__": importlib.machinery.SourceFileLoader("__main__", path), "__builtins__": builtins,
    })
    sys.modules["__main__"] = main  # pickling, multiprocessing spawn and `import __main__` find the script
    with tokenize.open(path) as f:  # honours a coding cookie, as the interpreter does
        source = f.read()
    exec(compile(source, path, "exec", dont_inherit=True), main.__dict__)


def _exit_code(exc: SystemExit) -> tuple[int, str | None]:
    """The exit code ``sys.exit(arg)`` gives, printing a message as Python does."""
    code = exc.code
    if code is None:
        return 0, None
    if isinstance(code, int):
        return code, None
    print(code, file=sys.stderr)
    return 1, str(code)


def _forget_bootstrap_path() -> None:
    """Take the advisor package back off the script's import path, where only we had put it."""
    added = os.environ.pop(BOOTSTRAP_PATH_ENV, None)
    if not added:
        return
    if added in sys.path:
        sys.path.remove(added)
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != added]
    if rest:
        os.environ["PYTHONPATH"] = os.pathsep.join(rest)
    else:
        os.environ.pop("PYTHONPATH", None)


def main(config_path: str) -> None:
    try:
        child = Child(config_path)
    except KeyboardInterrupt:  # Ctrl-C before anything ran: nothing to save, and no traceback of ours
        raise SystemExit(EXIT_INTERRUPTED) from None
    child.run()
