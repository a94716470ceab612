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

It is made before any work (before the script runs, before a trace is
loaded), and a folder that cannot be made is one sentence naming the path
and the cause: a parent that is a file, a read-only or unwritable folder, a
file system that takes no new folders (``/proc``), a read-only current folder
without ``--out``.
"""

from __future__ import annotations

import errno
import json
import os
import re
import time
from pathlib import Path
from typing import Any

from advisor.errors import RunDirError, UsageError

__all__ = ["RunDir"]

METADATA = "run.json"


class RunDir:
    """A run directory on disk."""

    def __init__(self, path: Path, made: list[Path] | None = None) -> None:
        self.path = path
        #: the folders :meth:`create` made for it (it and missing parents), deepest first
        self.made = made or []

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    # creation --------------------------------------------------------------------
    @classmethod
    def create(cls, name: str, out: Path | None = None, base: Path = Path("advisor-runs")) -> RunDir:
        """Make a fresh run directory: ``out`` if given (must be new or empty), else under ``base``."""
        if out is not None:
            if out.is_dir() and not _is_empty(out):
                raise UsageError(
                    f"{out}: already exists and is not an empty folder; a run directory is never "
                    "overwritten, so pass a new --out path"
                )
            if out.exists() and not out.is_dir():
                raise UsageError(f"{out}: already exists as a file; a run directory is never overwritten, "
                                 "so pass a new --out path")
            made = _mkdir(out, exist_ok=True, hint="pass --out a folder you can write to")
            if not os.access(out, os.W_OK | os.X_OK):  # an empty folder given, but not ours to write in
                raise UsageError(f"{out}: cannot hold the run directory: the folder is not writable; "
                                 "pass --out a folder you can write to")
            return cls(out, made)
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or "run"
        stamp = time.strftime("%Y%m%d-%H%M%S")
        hint = "pass --out DIR to put the run directory somewhere you can write to"
        for n in range(1, 1000):
            candidate = base / (f"{stamp}-{stem}" if n == 1 else f"{stamp}-{stem}-{n}")
            try:
                made = _mkdir(candidate, exist_ok=False, hint=hint)
            except FileExistsError:
                continue
            return cls(candidate, made)
        raise UsageError(f"{base}: could not make a fresh run directory")

    def discard_if_empty(self) -> None:
        """Remove the folders :meth:`create` made, when nothing was written to them (the work failed on bad input).

        A folder the user made (an empty ``--out``) and anything written stay.
        """
        for folder in self.made:
            try:
                folder.rmdir()
            except OSError:
                return  # not empty, or gone: what is there stays

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


def _is_empty(folder: Path) -> bool:
    try:
        return not any(folder.iterdir())
    except OSError:
        return False


#: errno -> why a folder cannot be made under an existing one
_CAUSES = {
    errno.EACCES: "is not writable (permission denied)",
    errno.EPERM: "does not allow new folders (operation not permitted)",
    errno.EROFS: "is on a read-only file system",
    errno.ENOTDIR: "is a file, not a folder",
    errno.ENOENT: "does not take new folders (the system says: no such file or directory)",
    errno.ENOSPC: "is on a full disk",
    errno.ENAMETOOLONG: "is the start of a path that is too long",
}


def _mkdir(path: Path, *, exist_ok: bool, hint: str) -> list[Path]:
    """``path.mkdir(parents=True)``, with one sentence naming the folder and the cause when it cannot be made.

    Returns the folders it made, deepest first.
    """
    missing = [p for p in [path, *path.parents] if not os.path.lexists(p)]
    try:
        path.mkdir(parents=True, exist_ok=exist_ok)
        return missing
    except FileExistsError:
        if exist_ok:  # a file in the way, found by mkdir itself
            raise UsageError(f"{path}: cannot be made: a file is in the way; {hint}") from None
        raise
    except OSError as exc:
        where = _existing_ancestor(path)
        cause = _CAUSES.get(exc.errno or 0, f"cannot hold it ({exc.strerror or exc})")
        if where is not None and not where.is_dir():
            cause = _CAUSES[errno.ENOTDIR]
        if where is None:
            place = "its folder"
        elif where == Path.cwd() or where == Path("."):
            place = f"the current folder {Path.cwd()}"
        else:
            place = str(where)
        raise UsageError(f"{path}: cannot make the run directory: {place} {cause}; {hint}") from None


def _existing_ancestor(path: Path) -> Path | None:
    """The nearest folder (or file) above ``path`` that exists."""
    for parent in path.parents:
        if os.path.lexists(parent):
            return parent
    return None
