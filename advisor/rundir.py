"""The run directory: everything one ``advisor diagnose`` produced.

Layout::

    advisor-runs/20261130-153000-train/
        run.json            command, environment, versions, exit status, timings, settings
        framework/          the framework stage: collector.json, rank<R>.pt.trace.json.gz,
                            status.rank<R>.json
        system/             the Nsight Systems stage (when it ran)
        kernel/             the Nsight Compute stage (when it ran)
        findings.json       the facts the analyzers found
        diagnoses.json      the rules that fired, rendered with this run's numbers
        report.md, report.html

A run directory is never overwritten: a fresh one is made for every run, and
``--out`` must name a folder that does not exist yet or is empty.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from advisor.errors import RunDirError, UsageError

__all__ = ["RunDir"]

METADATA = "run.json"


class RunDir:
    """A run directory on disk."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    # creation --------------------------------------------------------------------
    @classmethod
    def create(cls, name: str, out: Path | None = None, base: Path = Path("advisor-runs")) -> RunDir:
        """Make a fresh run directory: ``out`` if given (must be new or empty), else under ``base``."""
        if out is not None:
            if out.exists() and (not out.is_dir() or any(out.iterdir())):
                raise UsageError(
                    f"{out}: already exists and is not an empty folder; a run directory is never "
                    "overwritten, so pass a new --out path"
                )
            out.mkdir(parents=True, exist_ok=True)
            return cls(out)
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or "run"
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for n in range(1, 1000):
            candidate = base / (f"{stamp}-{stem}" if n == 1 else f"{stamp}-{stem}-{n}")
            try:
                candidate.mkdir(parents=True)
            except FileExistsError:
                continue
            return cls(candidate)
        raise UsageError(f"{base}: could not make a fresh run directory")

    @classmethod
    def open(cls, path: Path) -> RunDir:
        """An existing run directory, checked to be one."""
        if not path.exists():
            raise RunDirError(path, "no such run directory")
        if not path.is_dir():
            raise RunDirError(path, "is a file, not a run directory")
        if not (path / METADATA).is_file():
            raise RunDirError(path, f"has no {METADATA}; it is not a run directory made by advisor")
        return cls(path)

    @staticmethod
    def looks_like(path: Path) -> bool:
        return path.is_dir() and (path / METADATA).is_file()

    # stages ----------------------------------------------------------------------
    def stage(self, name: str) -> Path:
        folder = self.path / name
        folder.mkdir(exist_ok=True)
        return folder

    def file(self, name: str) -> Path:
        return self.path / name

    def relative(self, path: Path) -> str:
        try:
            return str(path.resolve().relative_to(self.path.resolve()))
        except ValueError:
            return str(path)

    # metadata --------------------------------------------------------------------
    def read_metadata(self) -> dict[str, Any]:
        path = self.path / METADATA
        if not path.exists():
            return {}
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise RunDirError(path, f"is not valid JSON ({exc.msg} at line {exc.lineno})") from None

    def update_metadata(self, **fields: Any) -> dict[str, Any]:
        data = self.read_metadata()
        data.update(fields)
        self.write_json(METADATA, data)
        return data

    def write_json(self, name: str, data: Any) -> Path:
        path = self.path / name
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=2, default=str))
        tmp.replace(path)
        return path

    def read_json(self, name: str) -> Any:
        path = self.path / name
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            raise RunDirError(self.path, f"has no {name}") from None
        except json.JSONDecodeError as exc:
            raise RunDirError(path, f"is not valid JSON ({exc.msg} at line {exc.lineno})") from None
