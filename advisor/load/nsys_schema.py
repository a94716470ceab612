"""What differs between Nsight Systems export versions: enum numbering, event types, id packing.

The SQLite export carries ``ENUM_*`` tables from 2022.4 on; older exports
(2022.2, schema 2.9) do not, but use the same numbers, which are copied here
from NVIDIA's export documentation so every version reads the same. The
loader (:mod:`advisor.load.nsys_sqlite`) prefers the file's own tables when
it has them.
"""

from __future__ import annotations

import re

import pandas as pd

__all__ = ["EVENT_CLASSES", "MEMCPY_KINDS", "MEMORY_KINDS", "NVTX_TYPE_NAMES", "SYNC_TYPES", "TEXT_COLUMNS",
           "event_layer", "memcpy_kind_of_enum", "split_global_id", "unversioned"]

#: columns that hold text (every other column is int64)
TEXT_COLUMNS = {"name", "full_name", "grid", "block", "kind", "src_memory", "dst_memory", "memory", "api", "layer",
                "sync_type", "domain", "process"}

# Built-in copies of the ENUM tables, for exports that do not carry them (2022.2 and older).
MEMCPY_KINDS = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
                8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "UVM HtoD", 12: "UVM DtoH", 13: "UVM DtoD"}
MEMORY_KINDS = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
                6: "Managed Static", 7: "Unknown"}
SYNC_TYPES = {0: "Unknown", 1: "Event sync", 2: "Stream wait sync", 3: "Stream sync", 4: "Context sync"}
EVENT_CLASSES = {0: "runtime", 1: "driver", 67: "backtrace"}
#: NVTX event types the loader reads: push/pop and start/end ranges (Nvtxt*: from ImportNvtxt), marks,
#: and domain creation (which names a domain id); ENUM_NSYS_EVENT_TYPE overrides them when present
NVTX_TYPE_NAMES = {"NvtxPushPopRange": 59, "NvtxStartEndRange": 60, "NvtxtPushPopRange": 70,
                   "NvtxtStartEndRange": 71, "NvtxMark": 34, "NvtxtMark": 65, "NvtxDomainCreate": 75}

#: ENUM_CUDA_MEMCPY_OPER names ("CUDA_MEMCPY_KIND_HTOD") -> our short names ("HtoD")
_MEMCPY_BY_ENUM_NAME = {v.upper().replace(" ", "_"): v for v in MEMCPY_KINDS.values()}
_VERSION_SUFFIX = re.compile(r"_v\d+$")


def memcpy_kind_of_enum(name: str, label: str) -> str:
    """An ``ENUM_CUDA_MEMCPY_OPER`` row -> our short kind (``HtoD``), else its label."""
    return _MEMCPY_BY_ENUM_NAME.get(name.replace("CUDA_MEMCPY_KIND_", ""), label)


def unversioned(names: pd.Series) -> pd.Series:
    """``cudaMemcpy_v3020`` -> ``cudaMemcpy``: the API without the version nsys appends."""
    return names.str.replace(_VERSION_SUFFIX, "", regex=True)


#: globalTid = (vm id << 48) | (pid << 24) | tid; globalPid the same with tid 0
_ID_BITS = 24
_ID_MASK = (1 << _ID_BITS) - 1


def split_global_id(gid: pd.Series) -> tuple[pd.Series, pd.Series]:
    """``globalTid``/``globalPid`` -> (pid, tid); tid is 0 for a globalPid."""
    values = pd.to_numeric(gid, errors="coerce").fillna(0).astype("int64").to_numpy()
    return (pd.Series((values >> _ID_BITS) & _ID_MASK, index=gid.index),
            pd.Series(values & _ID_MASK, index=gid.index))


def event_layer(label: str) -> str:
    """``CUDA runtime`` -> runtime, ``CUDA driver`` -> driver, ``CUDA backtrace`` -> backtrace."""
    low = label.lower()
    for word in ("backtrace", "driver", "runtime"):
        if "cuda" in low and word in low:
            return word
    return "other"
