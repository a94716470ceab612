"""Reading source locations and module paths back out of trace event names.

Two kinds of names carry them:

- the collector's labels, ``advisor::src train.py:57 in augment`` and
  ``advisor::module Net.encoder.0`` (exact call sites);
- in traces recorded elsewhere with ``with_stack=True``, the profiler's Python
  frames, ``train.py(40): forward``, and with ``with_modules=True``,
  ``nn.Module: Linear_0`` (the function's first line, not the call site).

A frame is the user's when its file is not in the standard library, in torch
or in an installed package.
"""

from __future__ import annotations

import re
import sys

from advisor.naming import MODULE_PREFIX, parse_source_label

__all__ = ["is_user_frame", "parse_module_name", "parse_python_frame", "parse_source_label", "python_frame_kind"]

_FRAME = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<func>.+)$")
_LIB_MARKERS = ("site-packages/", "dist-packages/", "/lib/python3", "<frozen", "<built-in", "<string>")
_LIB_TOP = frozenset(sys.stdlib_module_names) | {
    "torch", "torchvision", "torchaudio", "numpy", "pandas", "transformers", "accelerate", "lightning",
    "pytorch_lightning", "apex", "fairscale", "deepspeed", "triton", "typing_extensions", "tqdm", "fbgemm_gpu",
    "torchrec", "timm", "einops", "hta", "advisor",
}


def parse_python_frame(name: str) -> tuple[str, int, str] | None:
    """``"train.py(40): forward"`` -> ``("train.py", 40, "forward")``."""
    m = _FRAME.match(name)
    return (m["file"], int(m["line"]), m["func"]) if m else None


def is_user_frame(path: str) -> bool:
    if path.startswith("<") or any(marker in path for marker in _LIB_MARKERS):
        return False
    top = path.lstrip("./").split("/", 1)[0]
    if top.endswith(".py"):
        top = top[:-3]
    return top not in _LIB_TOP


def parse_module_name(name: str) -> str | None:
    """The module path of an ``advisor::module`` label or an ``nn.Module:`` frame."""
    if name.startswith(MODULE_PREFIX):
        return name[len(MODULE_PREFIX):]
    if name.startswith("nn.Module: "):
        return name[len("nn.Module: "):]
    return None


#: torch's own functions written in Python that a user's line calls (``F.cross_entropy``, ``Tensor.backward``):
#: their frame is the call itself, not library code between the line and the call
_API_FILES = ("torch/nn/functional.py", "torch/functional.py", "torch/_tensor.py")


def python_frame_kind(name: str) -> int:
    """0: not a frame of Python code (a C function, ``<built-in method exp ...>``, or the profiler's
    ``nn.Module: Linear_0`` marker); 1: a frame of Python code, ``file(line): func``; 2: one of torch's API
    functions written in Python (:data:`_API_FILES`)."""
    frame = parse_python_frame(name)
    if frame is None:
        return 0
    return 2 if frame[0].endswith(_API_FILES) else 1
