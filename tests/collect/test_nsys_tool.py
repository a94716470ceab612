"""Finding nsys and its importer, choosing trace options, and the command the system stage runs."""

from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path

import pytest

from advisor.collect import nsys as nsys_collect
from advisor.collect.config import CollectorConfig
from advisor.collect.nsys import nsys_command, stage_config
from advisor.tools.nsys import NsysTool, describe, find_importer, find_nsys
from advisor.errors import ToolMissingError

FULL = frozenset({"cuda", "nvtx", "osrt", "cudnn", "cublas", "mpi", "opengl"})


def _real_nsys() -> NsysTool:
    try:
        return find_nsys()
    except ToolMissingError as exc:
        pytest.skip(str(exc))


def test_the_machines_nsys() -> None:
    tool = _real_nsys()
    assert tool.year >= 2022
    assert {"cuda", "nvtx", "osrt"} <= tool.trace_apis  # read from `nsys profile --help`
    assert tool.trace_options(cuda=False) == ["nvtx", "osrt"]
    assert tool.trace_options(cuda=True)[:3] == ["cuda", "nvtx", "osrt"]


def test_debian_importer_is_found_through_the_link_chain() -> None:
    tool = _real_nsys()
    importer = find_importer(tool)
    assert importer is not None and importer.name == "QdstrmImporter" and os.access(importer, os.X_OK)
    if tool.path == Path("/usr/bin/nsys") and Path("/usr/lib/nsight-systems/host-linux-x64").is_dir():
        # nsys resolves to .../x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys and looks beside it,
        # while the importer sits under the link in the middle: /usr/lib/nsight-systems/
        assert importer == Path("/usr/lib/nsight-systems/host-linux-x64/QdstrmImporter")


def test_importer_found_next_to_any_link(tmp_path) -> None:
    real = tmp_path / "pkg" / "target-linux-x64" / "nsys"
    real.parent.mkdir(parents=True)
    real.write_text("#!/bin/sh\n")
    real.chmod(0o755)
    home = tmp_path / "share" / "nsight-systems"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "nsys").symlink_to(real)
    importer = home / "host-linux-x64" / "QdstrmImporter"
    importer.parent.mkdir()
    importer.write_text("#!/bin/sh\n")
    importer.chmod(0o755)
    link = tmp_path / "bin" / "nsys"
    link.parent.mkdir()
    link.symlink_to(home / "bin" / "nsys")
    assert find_importer(NsysTool(link, "2024.1", FULL), env={}) == importer
    assert find_importer(NsysTool(real, "2024.1", FULL), env={}) is None  # the resolved path alone misses it
    assert find_importer(NsysTool(real, "2024.1", FULL), env={"ADVISOR_QDSTRM_IMPORTER": str(importer)}) == importer


def test_missing_nsys(tmp_path) -> None:
    with pytest.raises(ToolMissingError, match=r"Nsight Systems \(nsys\) was not found on PATH"):
        find_nsys({"PATH": str(tmp_path)})
    with pytest.raises(ToolMissingError, match="ADVISOR_NSYS is .*not an executable file"):
        find_nsys({"PATH": "", "ADVISOR_NSYS": str(tmp_path / "nsys")})
    fake = tmp_path / "nsys"
    fake.write_text("#!/bin/sh\necho hello\n")
    fake.chmod(0o755)
    with pytest.raises(ToolMissingError, match="printed no version"):
        describe(fake)


def test_trace_options_follow_the_gpu_and_the_version() -> None:
    tool = NsysTool(Path("/opt/nsys"), "2025.5.2", FULL)
    assert tool.trace_options(cuda=True) == ["cuda", "nvtx", "osrt", "cudnn", "cublas"]
    assert tool.trace_options(cuda=False) == ["nvtx", "osrt"]
    old = NsysTool(Path("/opt/nsys"), "2021.1", frozenset({"cuda", "nvtx", "osrt"}))
    assert old.trace_options(cuda=True) == ["cuda", "nvtx", "osrt"]  # no cudnn/cublas in this version
    unknown = NsysTool(Path("/opt/nsys"), "2023.1", frozenset())
    assert unknown.trace_options(cuda=True) == ["cuda", "nvtx", "osrt"]


def test_the_profile_command(tmp_path) -> None:
    tool = NsysTool(Path("/opt/nsys"), "2022.4.2", FULL)
    cmd, notes = nsys_command(tool, tmp_path / "collector.json", tmp_path / "report", cuda=False)
    assert cmd[:6] == ["/opt/nsys", "profile", "--trace=nvtx,osrt", "--sample=none", "--cpuctxsw=none",
                       "--capture-range=nvtx"]
    assert "--nvtx-capture=advisor::capture" in cmd and "--capture-range-end=stop" in cmd
    assert f"--output={tmp_path / 'report'}" in cmd and cmd[-1] == str(tmp_path / "collector.json")
    assert notes == []


def test_newer_nvtx_records_the_whole_run_on_old_nsys(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(nsys_collect.metadata, "version", lambda name: "0.2.13")
    old = NsysTool(Path("/opt/nsys"), "2022.4.2", FULL)
    cmd, notes = nsys_command(old, tmp_path / "c.json", tmp_path / "report", cuda=False)
    assert not any(c.startswith("--capture-range") for c in cmd)
    assert "nvtx 0.2.13 does not reach nsys 2022.4.2" in notes[0] and "recorded the whole run" in notes[0]
    cmd, notes = nsys_command(old, tmp_path / "c.json", tmp_path / "report", cuda=True)
    assert "--capture-range=cudaProfilerApi" in cmd and "--nvtx-capture=advisor::capture" not in cmd
    assert "cudaProfilerStart/Stop" in notes[0]
    new = NsysTool(Path("/opt/nsys"), "2024.2.1", FULL)
    cmd, notes = nsys_command(new, tmp_path / "c.json", tmp_path / "report", cuda=False)
    assert "--capture-range=nvtx" in cmd and notes == []
    assert metadata.version("nvtx")  # the real lookup is untouched outside this module


def test_stage_config_reuses_the_framework_run(tmp_path) -> None:
    cfg = CollectorConfig(script="train.py", args=["--lr", "0.1"], wait=2, warmup=1, active=4, step_method="auto",
                          with_stack=True, profile_memory=True, run_to_end=True)
    out = stage_config(cfg, tmp_path, "dataloader")
    assert (out.mode, out.out_dir, out.step_method) == ("nvtx", str(tmp_path), "dataloader")
    assert (out.args, out.wait, out.warmup, out.active) == (["--lr", "0.1"], 2, 1, 4)
    assert not (out.with_stack or out.profile_memory or out.run_to_end or out.source_lines)
    assert stage_config(cfg, tmp_path, None).step_method == "auto"
    assert cfg.mode == "kineto"  # the framework run's settings are not changed
