"""The roof of the roofline: a GPU's peak TFLOP/s per data type and its memory bandwidth.

The figures are data, not code: ``gpu_specs.yaml`` beside this module (shipped in the wheel), one entry
per GPU with the datasheet each figure comes from. :func:`spec_for` picks the entry for the trace's
``deviceProperties`` (by name, and by memory size where one name covers several boards); a user's own
table (same format, ``--gpu-spec FILE``) replaces the built-in one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from advisor.errors import InputError
from advisor.yamlio.yaml_cache import named_cache

if TYPE_CHECKING:
    from advisor.analyze.framework.view import TraceView

__all__ = ["BUILTIN", "SPEC_META_KEY", "GpuLink", "GpuSpec", "device_spec", "load_specs", "spec_for"]

#: the run metadata key (``run.json``) of a user's GPU spec table (``--gpu-spec FILE``)
SPEC_META_KEY = "gpu_spec"

BUILTIN = Path(__file__).with_name("gpu_specs.yaml")
_GIB = 1 << 30
_DTYPES = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8")


@dataclass(frozen=True)
class GpuLink:
    """A GPU's interconnect to its peers: its name and peak GB/s per direction (what NCCL's bus bandwidth meets)."""

    name: str
    gb_s: float
    source: str = ""


@dataclass(frozen=True)
class GpuSpec:
    """One GPU's peaks (TFLOP/s per dtype on the matrix and vector units) and DRAM bandwidth (TB/s)."""

    name: str
    match: str
    memory_tb_s: float
    matrix: dict[str, float] = field(default_factory=dict)
    vector: dict[str, float] = field(default_factory=dict)
    source: str = ""
    memory_gib: tuple[float, float] | None = None
    link: GpuLink | None = None

    def peak_tflops(self, unit: str, dtype: str) -> float | None:
        """The peak for work of ``dtype`` on ``unit`` (matrix or vector); ``None`` when the table has none.

        Matrix work of a dtype the matrix units lack (fp32 GEMMs on NVIDIA GPUs without TF32) runs on the
        vector units; vector fp16/bf16 work without its own figure is bounded by the fp32 rate (the
        smaller roof: the share it gives is the larger, so "far below the roofline" is never overstated).
        """
        table = self.matrix if unit == "matrix" else self.vector
        if dtype in table:
            return table[dtype]
        if unit == "matrix" and dtype in self.vector:
            return self.vector[dtype]
        if dtype in ("fp16", "bf16") and "fp32" in self.vector:
            return self.vector["fp32"]
        return None

    def fits(self, device: dict[str, Any]) -> bool:
        name = str(device.get("name", ""))
        if not re.search(self.match, name, re.IGNORECASE):
            return False
        if self.memory_gib is None:
            return True
        mem = device.get("totalGlobalMem")
        if not isinstance(mem, (int, float)):
            return False
        return self.memory_gib[0] <= mem / _GIB < self.memory_gib[1]


def load_specs(path: Path | None = None) -> tuple[GpuSpec, ...]:
    """The GPU table: the built-in one, or the file at ``path``; a malformed file is an :class:`InputError`."""
    return _load(Path(path) if path is not None else BUILTIN)


@cache
def _load(path: Path) -> tuple[GpuSpec, ...]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(path, "no such file (--gpu-spec wants a YAML file of GPU peaks, like the built-in "
                               "advisor/analyze/framework/gpu_specs.yaml)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, f"cannot be read as a GPU spec table: {exc}") from None
    data = _parsed(path, text)
    entries = data.get("gpus") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise InputError(path, "has no `gpus:` list; each entry needs name, match, memory_tb_s and matrix/vector peaks")
    return tuple(_entry(path, i, e) for i, e in enumerate(entries))


def _parsed(path: Path, text: str) -> Any:
    """The table's YAML, parsed once per machine (a cache like the rule files', :mod:`advisor.yamlio.yaml_cache`):
    a run then does not import PyYAML for it. libyaml's safe loader where PyYAML has it."""

    def parse() -> tuple[Any, dict]:
        import yaml

        try:
            return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)), {}
        except yaml.YAMLError as exc:
            raise InputError(path, f"cannot be read as a GPU spec table: {exc}") from None

    return named_cache("gpu-specs", b"yaml.safe_load 1").get_or_parse(text, parse)[0]


def _entry(path: Path, i: int, e: Any) -> GpuSpec:
    if not isinstance(e, dict) or not isinstance(e.get("name"), str) or not isinstance(e.get("match"), str):
        raise InputError(path, f"gpus[{i}] needs a `name` and a `match` (a regular expression over the device name)")
    bw = e.get("memory_tb_s")
    if not isinstance(bw, (int, float)) or bw <= 0:
        raise InputError(path, f"gpus[{i}] ({e['name']}): `memory_tb_s` must be a positive number")
    try:
        re.compile(e["match"])
    except re.error as exc:
        raise InputError(path, f"gpus[{i}] ({e['name']}): `match` is not a regular expression ({exc})") from None
    peaks = {unit: _peaks(path, i, e, unit) for unit in ("matrix", "vector")}
    mem = e.get("memory_gib")
    if mem is not None and not (isinstance(mem, list) and len(mem) == 2):
        raise InputError(path, f"gpus[{i}] ({e['name']}): `memory_gib` must be [low, high]")
    return GpuSpec(e["name"], e["match"], float(bw), peaks["matrix"], peaks["vector"], str(e.get("source", "")),
                   (float(mem[0]), float(mem[1])) if mem else None, _link(path, i, e))


def _link(path: Path, i: int, e: dict[str, Any]) -> GpuLink | None:
    raw = e.get("link")
    if raw is None:
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or \
            not isinstance(raw.get("gb_s"), (int, float)) or raw["gb_s"] <= 0:
        raise InputError(path, f"gpus[{i}] ({e['name']}): `link` needs a `name` and `gb_s`, the interconnect's "
                               "positive peak GB/s per direction")
    return GpuLink(raw["name"], float(raw["gb_s"]), str(raw.get("source", "")))


def _peaks(path: Path, i: int, e: dict[str, Any], unit: str) -> dict[str, float]:
    raw = e.get(unit) or {}
    if not isinstance(raw, dict) or any(k not in _DTYPES or not isinstance(v, (int, float)) or v <= 0
                                        for k, v in raw.items()):
        raise InputError(path, f"gpus[{i}] ({e['name']}): `{unit}` maps data types ({', '.join(_DTYPES)}) to "
                               "positive TFLOP/s")
    return {k: float(v) for k, v in raw.items()}


def spec_for(devices: list[dict[str, Any]], specs: tuple[GpuSpec, ...]) -> tuple[GpuSpec | None, str]:
    """The entry for the trace's first GPU, and its device name ("" when the trace names none)."""
    if not devices:
        return None, ""
    device = devices[0]
    name = str(device.get("name", ""))
    return next((s for s in specs if s.fits(device)), None), name


def device_spec(view: TraceView) -> tuple[GpuSpec | None, str]:
    """The spec of the device with the most GPU time (a user's ``--gpu-spec`` table first), and its name."""
    specs = load_specs(view.run_meta.get(SPEC_META_KEY))
    devices = view.trace.devices
    chosen = [d for d in devices if d.get("id") == view.gpu.device] or devices
    return spec_for(chosen, specs)
