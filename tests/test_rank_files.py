"""A folder of rank traces analysed one trace per worker (advisor/rank_files.py): the same findings as all the
traces loaded at once, with 1 and 2 workers, and memory bounded: one trace held per worker beside the first rank's."""

from __future__ import annotations

import gc
import gzip
import json
import pickle
import weakref
from pathlib import Path

import orjson
import pytest

from advisor import rank_files
from advisor.analyze.ranks.digest import RankDigest
from advisor.errors import TraceError
from advisor.pipeline import analyze_trace_files, analyze_traces, load_traces
from conftest import fixture_path

RECSYS = ("kineto", "a100_recsys_2of128_ranks")


def _recsys() -> list[Path]:
    return [fixture_path(*RECSYS, f"rank{r}.pt.trace.json.gz") for r in (0, 1)]


def _same(a: object, b: object) -> bool:
    dump = lambda d: json.dumps(d.to_dict(), sort_keys=True, default=str)  # noqa: E731
    return dump(a) == dump(b)


def _copies(folder: Path, count: int) -> list[Path]:
    """``count`` distinct ranks made from the two recsys ranks (rank k is fixture rank k % 2)."""
    docs = [orjson.loads(gzip.decompress(p.read_bytes())) for p in _recsys()]
    folder.mkdir()
    paths = []
    for k in range(count):
        doc = dict(docs[k % 2], distributedInfo={**docs[k % 2]["distributedInfo"], "rank": k, "world_size": count})
        path = folder / f"rank{k}.pt.trace.json.gz"
        path.write_bytes(gzip.compress(orjson.dumps(doc), compresslevel=1))
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def loaded_at_once() -> object:
    return analyze_traces(load_traces(_recsys()))


@pytest.mark.parametrize("workers", [1, 2])
def test_rank_folder_gives_the_findings_of_all_traces_loaded_at_once(loaded_at_once: object, workers: int) -> None:
    findings = analyze_trace_files(_recsys(), workers=workers)
    assert findings.get("ranks.count") == 2
    assert findings.get("ranks.gpu.table") and findings.get("ranks.skew.table")  # host, GPU and skew compared
    assert _same(findings, loaded_at_once)


@pytest.mark.parametrize("workers", [1, 2])
def test_first_rank_in_a_later_file_is_the_one_analysed_whole(tmp_path: Path, loaded_at_once: object,
                                                             workers: int) -> None:
    # rank 1's file sorts first here: it is loaded while the other is digested, then swapped for rank 0's
    folder = tmp_path / "ranks"
    folder.mkdir()
    for rank, name in ((0, "b.pt.trace.json.gz"), (1, "a.pt.trace.json.gz")):
        (folder / name).write_bytes(_recsys()[rank].read_bytes())
    paths = sorted(folder.iterdir())
    findings = analyze_trace_files(paths, workers=workers)
    expected = analyze_traces(load_traces(paths))
    assert _same(findings, expected)
    assert findings.facts["steps.time_ms"].value == loaded_at_once.facts["steps.time_ms"].value  # rank 0's steps


def test_many_ranks_same_findings_with_one_and_two_workers(tmp_path: Path) -> None:
    paths = _copies(tmp_path / "ranks", 6)
    serial = analyze_trace_files(paths, workers=1)
    parallel = analyze_trace_files(paths, workers=2)
    assert serial.get("ranks.count") == 6
    assert _same(serial, parallel)
    assert _same(serial, analyze_traces(load_traces(paths)))


def test_one_trace_held_at_a_time_beside_the_first_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = _copies(tmp_path / "ranks", 5)
    alive: list[weakref.ref] = []
    most = 0
    real_load = rank_files._load

    def counting_load(path: Path, run_meta: object) -> object:
        nonlocal most
        gc.collect()
        most = max(most, sum(1 for ref in alive if ref() is not None) + 1)
        view = real_load(path, run_meta)
        alive.append(weakref.ref(view.trace))
        return view

    monkeypatch.setattr(rank_files, "_load", counting_load)
    findings = analyze_trace_files(paths, workers=1)
    assert findings.get("ranks.count") == 5
    assert most == 2  # the first rank's trace, and the one being digested


def test_digest_is_small_and_crosses_processes() -> None:
    digest = rank_files.digest_file(_recsys()[1])
    assert isinstance(digest, RankDigest) and digest.rank == 1
    size = len(pickle.dumps(digest))
    assert size < _recsys()[1].stat().st_size  # smaller than even the gzip file: the tables stay behind
    assert pickle.loads(pickle.dumps(digest)).parts.keys() == digest.parts.keys()


def test_workers_are_bounded_by_the_memory_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = _copies(tmp_path / "ranks", 4)
    monkeypatch.delenv(rank_files.WORKERS_ENV, raising=False)
    assert rank_files.worker_count(paths, 8) == 3  # at most one per other trace
    assert rank_files.worker_count(paths, 1) == 0  # 1: all in this process
    # each trace is counted at 128 MB + 1.4 x its JSON (a few MB here): 300 MB leaves room for one worker
    monkeypatch.setenv("ADVISOR_MEMORY_MB", "300")
    assert rank_files.worker_count(paths, 8) == 1
    monkeypatch.setenv(rank_files.WORKERS_ENV, "2")
    monkeypatch.delenv("ADVISOR_MEMORY_MB")
    assert rank_files.worker_count(paths) == 2
    monkeypatch.setenv(rank_files.WORKERS_ENV, "many")
    with pytest.raises(TraceError, match="not a number of worker processes"):
        rank_files.worker_count(paths)


def test_broken_trace_in_a_worker_is_one_clear_error(tmp_path: Path) -> None:
    paths = _copies(tmp_path / "ranks", 3)
    paths[2].write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X", "ts": 1,'))
    with pytest.raises(TraceError) as caught:
        analyze_trace_files(paths, workers=2)
    assert caught.value.path == paths[2]
    assert "not valid JSON" in str(caught.value)
