"""The Nsight Systems SQLite loader on real exports: 2022.2 (schema 2.9.1) and 2025.5 (schema 3.24.0)."""

from __future__ import annotations

import sqlite3

import pandas as pd
import pytest

from advisor.errors import TraceError
from advisor.load.nsys_sqlite import TABLES, is_nsys_sqlite, load_nsys_sqlite, split_global_id
from conftest import fixture_path

SAXPY = ("nsys", "saxpy_mpi_cuda_nvtx_nsys2022.2.sqlite")
VECADD = ("nsys", "vecadd_nsys2025.5.sqlite")


@pytest.fixture(scope="module")
def saxpy():
    return load_nsys_sqlite(fixture_path(*SAXPY))


@pytest.fixture(scope="module")
def vecadd():
    return load_nsys_sqlite(fixture_path(*VECADD))


def test_saxpy_2022_counts(saxpy) -> None:
    counts = saxpy.counts()
    assert counts["kernels"] == 5
    assert counts["memcpy"] == 15
    # 95 rows in CUPTI_ACTIVITY_KIND_RUNTIME: 56 runtime calls, 1 driver call, and 38 backtrace rows
    # (event class 67) that repeat a call's correlation id to carry its call chain: 57 calls.
    assert counts["runtime"] == 57
    assert (saxpy.runtime["layer"] == "runtime").sum() == 56
    assert (saxpy.runtime["layer"] == "driver").sum() == 1
    assert (saxpy.runtime["callchain"] >= 0).sum() == 38
    assert counts["nvtx"] == 22  # push/pop ranges; the domain-create and thread-name rows are not ranges
    assert counts["memset"] == counts["sync"] == counts["osrt"] == 0


def test_vecadd_2025_counts(vecadd) -> None:
    assert vecadd.counts() == {"kernels": 1, "memcpy": 3, "memset": 0, "runtime": 15, "sync": 1, "nvtx": 0,
                               "osrt": 446, "threads": 197}
    assert (vecadd.runtime["layer"] == "driver").sum() == 4
    assert not vecadd.has("nvtx") and "nvtx" not in vecadd.present  # a lazy export has no NVTX_EVENTS at all


def test_metadata_tables_old_and_new(saxpy, vecadd) -> None:
    # EXPORT_META_DATA in 2022, META_DATA_EXPORT in 2025
    assert (saxpy.version, saxpy.schema) == ("2022.2.1.31", "2.9.1")
    assert (vecadd.version, vecadd.schema) == ("2025.5.2.266", "3.24.0")
    assert saxpy.meta["has_enum_tables"] is False and vecadd.meta["has_enum_tables"] is True
    assert saxpy.gpus[0]["name"] == "NVIDIA A100-SXM4-40GB"
    assert vecadd.gpus[0]["name"] == "NVIDIA GeForce RTX 3060"


def test_nvtx_text_and_text_id(saxpy) -> None:
    names = saxpy.nvtx["name"].value_counts().to_dict()
    # MPI ranges are registered strings (textId); the user's "saxpy" ranges carry inline text
    assert names == {"MPI_Send": 10, "MPI_Recv": 5, "saxpy": 5, "MPI_Init": 1, "MPI_Finalize": 1}
    by_name = saxpy.nvtx.set_index("name")
    assert (by_name.loc["MPI_Send", "domain"] == "MPI").all()
    assert by_name.loc["MPI_Init", "dur"] == 710796807 - 65117824
    assert (saxpy.nvtx["kind"] == "range").all()


def test_enums_with_and_without_tables(saxpy, vecadd) -> None:
    for trace in (saxpy, vecadd):
        kinds = trace.memcpy.groupby(["kind", "src_memory", "dst_memory"]).size().to_dict()
        assert set(kinds) == {("HtoD", "Pageable", "Device"), ("DtoH", "Device", "Pageable")}
    assert vecadd.sync["sync_type"].tolist() == ["Context sync"]


def test_strings_and_versioned_api_names(saxpy, vecadd) -> None:
    assert saxpy.kernels["name"].unique().tolist() == ["saxpy"]
    assert saxpy.kernels["full_name"].iloc[0] == "saxpy(double *, double *, double *, double, int)"
    assert vecadd.kernels["name"].tolist() == ["kernVectorAdd"]
    apis = vecadd.runtime["api"].value_counts().to_dict()
    assert apis["cudaMalloc"] == 3 and apis["cudaMemcpy"] == 3 and apis["cudaDeviceSynchronize"] == 1
    assert "cudaMemcpy_v3020" in set(vecadd.runtime["name"])
    assert (saxpy.runtime["api"] == "cudaMemcpy").sum() == 15


def test_global_ids(saxpy, vecadd) -> None:
    assert set(saxpy.kernels["pid"]) == {1230493}
    main = saxpy.runtime[["pid", "tid"]].drop_duplicates().values.tolist()
    assert main == [[1230493, 1230493]]
    pid, tid = split_global_id(pd.Series([302119224788637, 302119223558144]))
    assert pid.tolist() == [1230493, 1230493] and tid.tolist() == [1230493, 0]
    threads = vecadd.threads.set_index("tid")
    assert threads.loc[1246, "name"] == "vecAdd" and threads.loc[1246, "process"] != ""


def test_times_are_int64_ns(vecadd) -> None:
    for name in TABLES:
        frame = getattr(vecadd, name)
        for col in ("start", "end", "dur"):
            if col in frame:
                assert frame[col].dtype == "int64", (name, col)
    k = vecadd.kernels.iloc[0]
    assert (k["start"], k["end"], k["dur"]) == (1143927944, 1143966856, 38912)


def test_empty_tables_keep_their_types(vecadd) -> None:
    assert vecadd.nvtx.empty and vecadd.nvtx["name"].dtype == object
    assert vecadd.nvtx[vecadd.nvtx["name"].str.startswith("x")].empty


def test_recognises_exports(tmp_path) -> None:
    assert is_nsys_sqlite(fixture_path(*SAXPY))
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("create table t (x int)")
    con.commit()
    con.close()
    assert not is_nsys_sqlite(other)
    with pytest.raises(TraceError, match="StringIds"):
        load_nsys_sqlite(other)
    text = tmp_path / "report.sqlite"
    text.write_text("not a database")
    assert not is_nsys_sqlite(text)
    with pytest.raises(TraceError, match="not a SQLite database"):
        load_nsys_sqlite(text)


def test_rows_whose_times_cannot_be_used_are_counted(tmp_path) -> None:
    """Issue 19: a row without a start has no place in time and is left out; one without an end, or ending before
    it starts, is counted as 0 long; each is said in a data-quality note, none dropped silently. Huge values
    (beyond int64, REAL 1e300) and text are not numbers."""
    path = tmp_path / "damaged.sqlite"
    path.write_bytes(fixture_path(*VECADD).read_bytes())
    con = sqlite3.connect(path)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'soon'")
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET start = end, end = start WHERE rowid = "
                "(SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_MEMCPY)")
    con.execute("UPDATE OSRT_API SET [end] = 1e300 WHERE rowid IN (SELECT rowid FROM OSRT_API LIMIT 10)")
    con.execute("UPDATE OSRT_API SET [end] = 'later' WHERE rowid IN (SELECT rowid FROM OSRT_API LIMIT 2 OFFSET 10)")
    con.commit()
    con.close()
    trace = load_nsys_sqlite(path)
    assert trace.kernels.empty and len(trace.memcpy) == 3 and len(trace.osrt) == 446
    assert (trace.memcpy["dur"] >= 0).all() and (trace.osrt["dur"] >= 0).all()
    assert trace.notes == [
        "data quality: CUPTI_ACTIVITY_KIND_KERNEL: 1 of 1 rows: `start` missing or not a number (left out)",
        "data quality: CUPTI_ACTIVITY_KIND_MEMCPY: 1 of 3 rows: `end` before `start` (counted as 0 long)",
        "data quality: OSRT_API: 12 of 446 rows: `end` missing or not a number (counted as 0 long)",
    ]


def test_real_exports_have_no_data_quality_notes(saxpy, vecadd) -> None:
    assert saxpy.notes == [] and vecadd.notes == []
