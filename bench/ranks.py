"""A folder of many rank traces, made by repeating the two recsys ranks of the fixtures.

Rank ``k`` of the folder is a copy of fixture rank ``k % 2`` (``rank0`` /
``rank1`` of ``a100_recsys_2of128_ranks``: two of a real 128-rank job) with
``distributedInfo.rank`` set to ``k``, ``world_size`` to the folder's size, and
its host process id moved to a pid of its own, so that every file is a distinct
rank of one job. The folder, ``recsys_<N>_ranks/`` in ``--out`` (default
bench/out/, ignored by git), is made once and reused.

    python bench/ranks.py --ranks 128
"""

from __future__ import annotations

import argparse
import gzip
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

FIXTURE_RANKS = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "kineto" / "a100_recsys_2of128_ranks"
#: pids below this are GPU devices in a Kineto trace; the host process has a real pid
_DEVICE_PIDS = 1000


def _host_pid(events: list[dict[str, Any]]) -> Any:
    """The most common process id that is not a device number: the profiled process."""
    pids = Counter(e.get("pid") for e in events if isinstance(e.get("pid"), int) and e["pid"] >= _DEVICE_PIDS)
    return pids.most_common(1)[0][0] if pids else None


def rank_copy(doc: dict[str, Any], rank: int, world: int) -> bytes:
    """``doc`` as rank ``rank`` of ``world``: its rank, world size and host pid rewritten."""
    events = doc["traceEvents"]
    host, pid = _host_pid(events), 100_000 + rank
    out = {k: v for k, v in doc.items() if k != "traceEvents"}
    out["distributedInfo"] = {**doc.get("distributedInfo", {}), "rank": rank, "world_size": world}
    out["traceEvents"] = [{**e, "pid": pid} if host is not None and e.get("pid") == host else e for e in events]
    return orjson.dumps(out)


def rank_folder(ranks: int, workdir: Path, source: Path = FIXTURE_RANKS, log=print) -> Path:
    """The cached folder of ``ranks`` rank traces, made if missing."""
    folder = workdir / f"recsys_{ranks}_ranks"
    if folder.is_dir() and len(list(folder.glob("rank*.pt.trace.json.gz"))) == ranks:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    sources = sorted(source.glob("rank*.pt.trace.json.gz"))
    docs = [orjson.loads(gzip.decompress(p.read_bytes())) for p in sources]
    total = 0
    for k in range(ranks):
        body = rank_copy(docs[k % len(docs)], k, ranks)
        total += len(body)
        (folder / f"rank{k}.pt.trace.json.gz").write_bytes(gzip.compress(body, compresslevel=1))
    log(f"made {folder}: {ranks} rank traces, {total / 1e6:.0f} MB of JSON")
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=128, help="rank traces in the folder")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out", help="where the folder is made")
    args = parser.parse_args(argv)
    print(rank_folder(args.ranks, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
