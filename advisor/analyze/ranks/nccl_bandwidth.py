"""NCCL bandwidth: each collective's bus bandwidth (:mod:`.collectives`) against the peak of the GPU's link.

Only *large* messages, of :data:`LARGE_BYTES` (1 MiB) or more, are judged against the link: below that a
collective's fixed cost (launch, the ranks' handshake, protocol set-up) dominates, and nccl-tests' own
curves stay far below the link's peak on healthy hardware, so a low figure there says "too many small
collectives" (GPU019's business), not "a slow link". Over the large ones, on the analysed device:

- ``comm.large_busbw_gb_s``: their bus bandwidth weighted by time, ``sum(bytes * factor) / sum(time)``
  (a few slow calls pull it down in proportion to the time they hold);
- ``comm.large_link_share``: that over the link's peak per direction (``link:`` in ``gpu_specs.yaml``);
- ``comm.large_excess_ms``: per step, their time beyond what each would take at :data:`ATTAINABLE_SHARE`
  (0.7) of that peak, ``sum(max(0, time - bytes * factor / (0.7 * peak)))``. nccl-tests' all-reduce on
  eight NVLink A100s plateaus near 230 of 300 GB/s (0.77); 0.7 is a target a tuned job reaches on large
  messages, not the datasheet figure no job does.

Without a link figure for the GPU (unknown device, or a table entry without ``link``) the bandwidths are
still given, and ``comm.link_note`` says why there is no share.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from advisor.analyze import group_by
from advisor.analyze.findings import FactSpec, records
from advisor.analyze.framework.gpu_spec import device_spec
from advisor.analyze.framework.per_step import NS_PER_MS
from advisor.analyze.framework.view import TraceView
from advisor.analyze.ranks.collectives import bus_factor, collective_kernels
from advisor.analyze.registry import analyzer

__all__ = ["ATTAINABLE_SHARE", "LARGE_BYTES"]

#: a message this large is bandwidth-bound, its bus bandwidth comparable with the link's peak
LARGE_BYTES = 1 << 20
#: the share of the link's peak a well-tuned job's large collectives reach (see the module docstring)
ATTAINABLE_SHARE = 0.7

PROVIDES = (
    FactSpec("comm.bandwidth", "table", "collectives by type and message size, with their bandwidths", columns={
        "collective": "text: allreduce, allgather, reducescatter, broadcast, reduce, sendrecv, alltoall",
        "algo": "text: NCCL's algorithm (RING, TREE, ...), from the kernel name",
        "proto": "text: NCCL's protocol (LL, LL128, SIMPLE), from the kernel name",
        "group": "count: ranks in the collective", "bytes": "bytes: message size",
        "calls": "count: kernels in the window", "ms": "ms: their kernel time per step",
        "algbw_gb_s": "GB/s: bytes / time over the calls", "busbw_gb_s": "GB/s: algbw times the bus factor",
    }),
    FactSpec("comm.large_ms", "ms", f"kernel time per step of the collectives of {LARGE_BYTES >> 20} MiB or more"),
    FactSpec("comm.large_share", "fraction", "that time as a share of the GPU window"),
    FactSpec("comm.large_busbw_gb_s", "GB/s", "their bus bandwidth, weighted by time"),
    FactSpec("comm.large_best_busbw_gb_s", "GB/s", "the highest bus bandwidth of any one of them"),
    FactSpec("comm.link", "text", "the GPU's interconnect (NVLink3, PCIe 4.0 x16, ...), from the GPU spec table"),
    FactSpec("comm.link_gb_s", "GB/s", "its peak per direction"),
    FactSpec("comm.large_link_share", "fraction", "the large collectives' bus bandwidth over the link's peak"),
    FactSpec("comm.large_excess_ms", "ms",
             f"their time per step beyond what it would be at {ATTAINABLE_SHARE:.0%} of the link's peak"),
    FactSpec("comm.link_note", "text", "why there is no link peak to compare with"),
)


def _table(coll: Any, steps: int) -> list[dict[str, Any]]:
    keys = [coll[c].to_numpy(dtype=object) for c in ("collective", "algo", "proto")] + \
        [coll[c].to_numpy("int64") for c in ("group", "bytes")]
    ids, n = group_by.group_ids(*keys)
    dur = coll["dur"].to_numpy("int64")
    ns = group_by.sums(ids, n, dur)
    calls = np.bincount(ids, minlength=n)
    first = group_by.first_rows(ids, n)
    rows = []
    for k in group_by.by_weight(ns, "quicksort"):
        kind, algo, proto, group, nbytes = (key[first[k]] for key in keys)
        algbw = nbytes * calls[k] / ns[k] if nbytes and ns[k] else None
        rows.append({"collective": kind, "algo": algo, "proto": proto, "group": int(group), "bytes": int(nbytes),
                     "calls": int(calls[k]), "ms": ns[k] / steps / NS_PER_MS, "algbw_gb_s": algbw,
                     "busbw_gb_s": algbw * bus_factor(kind, int(group)) if algbw is not None else None})
    return rows


@analyzer("nccl_bandwidth", needs=("kernel",), provides=PROVIDES)
def nccl_bandwidth(view: TraceView) -> dict[str, Any]:
    """Bus bandwidth per collective and message size, and the large messages' share of the link's peak."""
    links = view.gpu
    if len(links.in_window) == 0 or links.window_ns <= 0:
        return {}
    coll = collective_kernels(view)
    if len(coll) == 0:
        return {}
    steps = links.steps
    out: dict[str, Any] = {"comm.bandwidth": records(_table(coll, steps))}
    large = coll[(coll["bytes"] >= LARGE_BYTES).to_numpy()]
    if len(large) == 0:
        return out
    dur = large["dur"].to_numpy("int64")
    bus_bytes = large["busbw_gb_s"].to_numpy() * dur  # bytes * factor
    busbw = float(bus_bytes.sum() / dur.sum())
    out.update({"comm.large_ms": dur.sum() / steps / NS_PER_MS, "comm.large_share": dur.sum() / links.window_ns,
                "comm.large_busbw_gb_s": busbw, "comm.large_best_busbw_gb_s": float(large["busbw_gb_s"].max())})
    spec, device = device_spec(view)
    if spec is None or spec.link is None:
        out["comm.link_note"] = (f"no GPU spec for {device!r}" if spec is None else
                                 f"the GPU spec {spec.name!r} has no link figure") + \
            ": bus bandwidths without a share of the link's peak (add `link:` in a --gpu-spec table)"
        return out
    peak = spec.link.gb_s
    ideal = bus_bytes / (ATTAINABLE_SHARE * peak)
    out.update({"comm.link": spec.link.name, "comm.link_gb_s": peak, "comm.large_link_share": busbw / peak,
                "comm.large_excess_ms": float(np.maximum(dur - ideal, 0).sum()) / steps / NS_PER_MS})
    return out
