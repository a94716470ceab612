"""The Nsight Systems command-line tool: finding it, what it supports, and turning reports into SQLite.

Where ``nsys`` is looked for, in order: ``$ADVISOR_NSYS``, ``nsys`` on
``PATH``, then NVIDIA's install folders (``/opt/nvidia/nsight-systems/*/bin``,
``/usr/local/cuda*/bin``).

A capture leaves a ``.qdstrm`` stream that nsys converts to ``.nsys-rep``
with its ``QdstrmImporter``. Some installs (Debian's ``nsight-systems``
package, and NVIDIA's own CUDA container image) cannot find that importer
("Importer error status: The importer binary and its dependencies were not
found") and leave only the ``.qdstrm``. :func:`import_qdstrm` then runs the
importer itself, from the ``host-linux-*`` folder of the same install (or
``$ADVISOR_QDSTRM_IMPORTER``). ``nsys export --type sqlite`` makes the file the
loader reads.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import IO

from advisor.errors import CollectError, ToolMissingError, TraceError

__all__ = ["NsysTool", "find_nsys", "import_qdstrm", "export_sqlite", "report_to_sqlite"]

ENV_NSYS = "ADVISOR_NSYS"
ENV_IMPORTER = "ADVISOR_QDSTRM_IMPORTER"
INSTALL_GLOBS = ("/opt/nvidia/nsight-systems/*/bin/nsys", "/usr/local/cuda*/bin/nsys",
                 "/usr/local/cuda*/nsight-systems-*/bin/nsys")
INSTALL_HINT = ("install Nsight Systems (https://developer.nvidia.com/nsight-systems, or the `nsight-systems` "
                "package) or point $ADVISOR_NSYS at its nsys")
#: tool runs that only ask nsys something
QUERY_TIMEOUT_S = 60
#: importing and exporting a report
CONVERT_TIMEOUT_S = 900


@dataclass(frozen=True)
class NsysTool:
    """An ``nsys`` executable and what it can do."""

    path: Path
    version: str
    trace_apis: frozenset[str] = field(default_factory=frozenset)

    @property
    def year(self) -> int:
        m = re.match(r"(\d{4})", self.version)
        return int(m.group(1)) if m else 0

    def trace_options(self, cuda: bool) -> list[str]:
        """The APIs to trace: CUDA ones only when the run has a GPU, and only those this nsys knows."""
        wanted = ["cuda", "nvtx", "osrt", "cudnn", "cublas"] if cuda else ["nvtx", "osrt"]
        if not self.trace_apis:  # help text not understood: the three every version has
            return [w for w in wanted if w in ("cuda", "nvtx", "osrt")]
        return [w for w in wanted if w in self.trace_apis]


def find_nsys(env: dict[str, str] | None = None) -> NsysTool:
    """The nsys to use; :class:`ToolMissingError` when there is none."""
    env = dict(os.environ if env is None else env)
    given = env.get(ENV_NSYS)
    if given:
        path = Path(given)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ToolMissingError(f"${ENV_NSYS} is {given}, which is not an executable file; {INSTALL_HINT}")
        return describe(path)
    found = shutil.which("nsys", path=env.get("PATH", ""))
    if found:
        return describe(Path(found))
    for pattern in INSTALL_GLOBS:
        for candidate in sorted(Path("/").glob(pattern.lstrip("/")), reverse=True):
            if os.access(candidate, os.X_OK):
                return describe(candidate)
    raise ToolMissingError(f"Nsight Systems (nsys) was not found on PATH; {INSTALL_HINT}")


@cache
def describe(path: Path) -> NsysTool:
    """Version and traceable APIs of an nsys executable."""
    version_text = _run_query([str(path), "--version"])
    m = re.search(r"(\d{4}\.\d+(?:\.\d+)*)", version_text)
    if not m:
        raise ToolMissingError(f"{path}: `nsys --version` printed no version ({version_text.strip()[:200]!r}); "
                               "is this Nsight Systems?")
    help_text = _run_query([str(path), "profile", "--help"])
    return NsysTool(path, m.group(1), _trace_apis(help_text))


def _run_query(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ToolMissingError(f"{cmd[0]}: could not be run ({exc})") from None
    return out.stdout + out.stderr


def _trace_apis(help_text: str) -> frozenset[str]:
    """The values `--trace` accepts, read from the `-t, --trace=` paragraph of `nsys profile --help`."""
    m = re.search(r"-t, --trace=[^\n]*\n(.*?)(?:Select the API|\n\s*\n\s*-)", help_text, re.S)
    return frozenset(re.findall(r"'([a-z0-9-]+)'", m.group(1))) if m else frozenset()


# --------------------------------------------------------------------------- reports


def find_importer(tool: NsysTool, env: dict[str, str] | None = None) -> Path | None:
    """The QdstrmImporter of the same Nsight Systems install."""
    env = dict(os.environ if env is None else env)
    if env.get(ENV_IMPORTER):
        path = Path(env[ENV_IMPORTER])
        return path if path.is_file() else None
    for root in _install_roots(tool.path):
        for candidate in sorted(root.glob("host-linux-*/QdstrmImporter")):
            if os.access(candidate, os.X_OK):
                return candidate
    return None


def _install_roots(path: Path) -> list[Path]:
    """Candidate install folders of an nsys: two and three levels above every link on the way to the binary.

    Debian links ``/usr/bin/nsys`` -> ``/usr/lib/nsight-systems/bin/nsys`` ->
    ``/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys``; the
    importer is under the middle one, which is why nsys itself misses it.
    """
    chain = [path]
    seen = {path}
    while chain[-1].is_symlink() and len(chain) < 16:
        nxt = Path(os.path.normpath(chain[-1].parent / os.readlink(chain[-1])))
        if nxt in seen:
            break
        seen.add(nxt)
        chain.append(nxt)
    chain.append(path.resolve())
    roots: list[Path] = []
    for link in chain:
        for root in (link.parent.parent, link.parent.parent.parent):
            if root not in roots:
                roots.append(root)
    return roots


def import_qdstrm(tool: NsysTool, qdstrm: Path, log: Path | None = None, out: Path | None = None) -> Path:
    """``X.qdstrm`` -> ``X.nsys-rep`` (or ``out``) with the install's QdstrmImporter."""
    importer = find_importer(tool)
    if importer is None:
        raise CollectError(
            f"{qdstrm}: nsys left only the raw .qdstrm stream and no QdstrmImporter was found next to "
            f"{tool.path.resolve()}; set ${ENV_IMPORTER} to its path (host-linux-x64/QdstrmImporter)")
    report = out or qdstrm.with_suffix(".nsys-rep")
    _convert([str(importer), "--force-overwrite", "--input-file", str(qdstrm), "--output-file", str(report)],
             log, qdstrm)
    if not report.exists():
        raise CollectError(f"{qdstrm}: {importer} ran but wrote no {report.name}; see {log or 'its output'}")
    return report


def export_sqlite(tool: NsysTool, report: Path, out: Path | None = None, log: Path | None = None) -> Path:
    """``nsys export --type sqlite`` of a ``.nsys-rep``."""
    out = out or report.with_suffix(".sqlite")
    _convert([str(tool.path), "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(out),
              str(report)], log, report)
    if not out.exists():
        raise CollectError(f"{report}: `nsys export --type sqlite` wrote no {out.name}; see {log or 'its output'}")
    return out


def _convert(cmd: list[str], log: Path | None, subject: Path) -> None:
    try:
        with _output(log) as fh:
            proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=CONVERT_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise CollectError(f"{subject}: `{' '.join(cmd[:3])} ...` did not finish in {CONVERT_TIMEOUT_S} s") from None
    except OSError as exc:
        raise CollectError(f"{subject}: could not run {cmd[0]} ({exc})") from None
    if proc.returncode != 0:
        raise CollectError(f"{subject}: `{Path(cmd[0]).name} {cmd[1]}` failed with exit code {proc.returncode}; "
                           f"see {log or 'its output'}")


@contextmanager
def _output(log: Path | None) -> Iterator[IO[bytes]]:
    """Append a tool's output to the stage's log file, or discard it."""
    with open(log, "ab") if log else open(os.devnull, "wb") as fh:
        yield fh


def report_to_sqlite(path: Path, out_dir: Path, log: Path | None = None) -> Path:
    """A ``.qdstrm``, ``.nsys-rep`` or ``.sqlite`` file -> an SQLite export inside ``out_dir``."""
    suffix = path.suffix.lower()
    if suffix == ".sqlite":
        target = out_dir / path.name
        if path.resolve() != target.resolve():
            shutil.copy2(path, target)
        return target
    if suffix not in (".nsys-rep", ".qdrep", ".qdstrm"):
        raise TraceError(path, "is not an Nsight Systems report (.nsys-rep, .qdrep, .qdstrm or .sqlite)")
    tool = find_nsys()
    report = path
    if suffix == ".qdstrm":  # the raw stream is large: import it in place of copying it
        report = import_qdstrm(tool, path, log, out_dir / (path.stem + ".nsys-rep"))
        if path.parent.resolve() == out_dir.resolve():
            path.unlink()  # a capture made into the run directory: the report replaces it
    return export_sqlite(tool, report, out_dir / (path.stem + ".sqlite"), log)
