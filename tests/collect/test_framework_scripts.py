"""`advisor diagnose` on messy real scripts: each gets the right outcome and a usable profile.

Every test runs a real script from ``scripts/`` under the real collector, in
a subprocess, the way a user would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, run_cli

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).parent / "scripts"


def _diagnose(tmp_path: Path, script: str, *options: str, script_args: tuple[str, ...] = (), timeout: float = 300):
    out = tmp_path / "run"
    # --no-escalate: these tests are about the framework collector; the workflow's later stages are tested elsewhere
    cli = run_cli("diagnose", str(SCRIPTS / script), "--out", str(out), "-q", "--no-escalate", "--no-trial", *options,
                  *(("--", *script_args) if script_args else ()), cwd=tmp_path, timeout=timeout)
    return cli, out


def _facts(out: Path) -> dict:
    return {f["name"]: f["value"] for f in json.loads((out / "findings.json").read_text())["facts"]}


def _meta(out: Path) -> dict:
    return json.loads((out / "run.json").read_text())


def _alive(pid: int) -> bool:
    """Running (a zombie, dead but not yet reaped by init, does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


# what the script sees ---------------------------------------------------------------

def _launch_env() -> dict[str, str]:
    """The environment without PYTHONPATH: the advisor must add itself, and hide that from the script."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def test_script_sees_what_plain_python_gives_it(tmp_path: Path) -> None:
    """sys.argv, __file__, __name__, cwd, sys.path and PYTHONPATH are those of `python script.py args`."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "input.txt").write_text("read from the working directory")
    script = os.path.relpath(SCRIPTS / "args_and_env.py", work)
    args = ["--lr", "0.1", "--report", "{report}", "pos", "--", "--not-an-option", "two words", "-x"]
    plain_args = [a.format(report=tmp_path / "plain.json") for a in args]
    subprocess.run([sys.executable, script, *plain_args], cwd=work, env=_launch_env(), check=True,
                   capture_output=True, timeout=120)
    under_args = [a.format(report=tmp_path / "under.json") for a in args]
    launcher = f"import sys; sys.path.insert(0, {str(REPO)!r}); from advisor.cli import main; main()"
    proc = subprocess.run(
        [sys.executable, "-c", launcher, "diagnose", script, "--out", str(tmp_path / "run"), "-q", "--no-escalate", "--no-trial",
         "--", *under_args],
        cwd=work, env=_launch_env(), capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    plain = json.loads((tmp_path / "plain.json").read_text())
    under = json.loads((tmp_path / "under.json").read_text())
    assert under["argv"][:3] == [script, "--lr", "0.1"]
    assert under["rest"] == ["pos", "--not-an-option", "two words", "-x"]
    for key in ("file", "name", "cwd", "path0", "path", "pythonpath", "rest", "input", "advisor_env", "globals"):
        assert under[key] == plain[key], key
    assert [a.replace("under.json", "plain.json") for a in under["argv"]] == plain["argv"]
    meta = _meta(tmp_path / "run")
    assert meta["outcome"] == "captured" and meta["exit_code"] == 0
    assert meta["args"] == under_args and meta["cwd"] == str(work)


def test_missing_required_argument_is_the_scripts_own_error(tmp_path: Path) -> None:
    cli, out = _diagnose(tmp_path, "args_and_env.py", script_args=("--lr", "0.1"))
    assert cli.code == 2  # argparse's exit code, passed through
    assert "the following arguments are required: --report" in cli.stderr
    meta = _meta(out)
    assert meta["outcome"] == "error" and meta["exit_code"] == 2 and meta["profile"] == "none"


# how the script ends ------------------------------------------------------------------

def test_sys_exit_zero_is_success_and_keeps_the_steps_recorded(tmp_path: Path) -> None:
    cli, out = _diagnose(tmp_path, "exit_zero.py")
    assert cli.code == 0, cli.output
    meta = _meta(out)
    assert (meta["outcome"], meta["exit_code"], meta["profile"]) == ("exited", 0, "partial")
    facts = _facts(out)
    # steps 8, 9 and 10 finished; step 11 only ran sys.exit(0) and is left out
    assert facts["steps.count"] == 3 and facts["steps.incomplete"] == 1
    assert facts["phases.forward.ms"] > 0 and facts["phases.optimizer.ms"] > 0


def test_exception_at_step_12_is_shown_and_the_profile_kept(tmp_path: Path) -> None:
    cli, out = _diagnose(tmp_path, "raise_at_step.py")
    assert cli.code == 1
    raise_line = _line_of(SCRIPTS / "raise_at_step.py", "raise RuntimeError")
    # the user's traceback, as Python prints it, without the collector's own frames
    assert "Traceback (most recent call last)" in cli.stderr
    assert f'raise_at_step.py", line {raise_line}, in check' in cli.stderr
    assert "RuntimeError: planted failure at step 12" in cli.stderr
    assert "bootstrap.py" not in cli.stderr and "runpy" not in cli.stderr
    assert f"RuntimeError: planted failure at step 12 (raise_at_step.py:{raise_line})" in cli.stderr
    meta = _meta(out)
    assert (meta["outcome"], meta["exit_code"], meta["profile"]) == ("error", 1, "partial")
    assert meta["error"]["type"] == "RuntimeError"
    assert Path(meta["error"]["file"]).name == "raise_at_step.py" and meta["error"]["line"] == raise_line
    facts = _facts(out)
    assert facts["steps.count"] == 4 and facts["steps.incomplete"] == 1  # steps 8-11; 12 raised
    report = (out / "report.md").read_text()
    assert "raised RuntimeError: planted failure at step 12" in report


def test_run_to_end_lets_the_script_finish_after_the_profile(tmp_path: Path) -> None:
    cli, out = _diagnose(tmp_path, "exit_zero.py", "--wait", "1", "--warmup", "1", "--active", "3", "--run-to-end")
    assert cli.code == 0, cli.output
    meta = _meta(out)
    # recorded steps 2 to 4, then ran on to its own sys.exit(0) after step 10
    assert (meta["outcome"], meta["profile"]) == ("exited", "complete")
    assert meta["ranks"][0]["steps_seen"] == 11
    assert _facts(out)["steps.count"] == 3


# how steps are found ------------------------------------------------------------------

def test_without_an_optimizer_dataloader_batches_are_the_steps(tmp_path: Path) -> None:
    cli, out = _diagnose(tmp_path, "no_optimizer.py")
    assert cli.code == 0, cli.output
    meta = _meta(out)
    assert meta["outcome"] == "captured" and meta["step_method"] == "dataloader"
    facts = _facts(out)
    assert facts["steps.method"] == "dataloader" and facts["steps.count"] == 5
    # the fetches of the warm-up and recorded steps, timed: wall and the process's CPU time
    timed = meta["dataloader_fetch"]
    assert timed["fetches"] >= 5 and timed["wall_ms"] > 0 and timed["cpu_ms"] > 0
    assert facts["dataloader.fetch_cpu_ratio"] == pytest.approx(timed["cpu_ms"] / timed["wall_ms"])
    # in process: a worker's hand-over of such a batch (x and y) was timed after the window, and the probe's own
    # 26 batches are not counted as the script's steps (5 wait, 3 warm-up, 5 recorded, at most 5 timed after)
    assert timed["in_process"] is True and timed["tensors"] == 2 and timed["bytes"] == 32 * 32 * 4 + 32 * 4
    assert meta["dataloader_handover"]["tensors"] == 2 and meta["dataloader_handover"]["ms"] > 0
    assert meta["ranks"][0]["steps_seen"] <= 5 + 3 + 2 * 5
    sources = {row["phase"]: row["source"] for row in facts["phases.table"]}
    assert sources["dataloader"] == sources["forward"] == sources["backward"] == "advisor labels"
    assert "steps recognised by dataloader" in (out / "report.md").read_text()
    assert "steps recognised by dataloader" in (out / "report.html").read_text()


@pytest.mark.parametrize("method", ["auto", "time"])
def test_time_window_when_nothing_else_marks_a_step(tmp_path: Path, method: str) -> None:
    # grad on and train mode, the whole loop inside one call of an outer module: no module is called outermost
    # twice, so nothing opens module steps
    cli, out = _diagnose(tmp_path, "model_only.py", "--steps", method, "--window-start", "1", "--window", "1",
                         script_args=("--seconds", "60", "--train-mode", "--one-call"))
    assert cli.code == 0, cli.output
    meta = _meta(out)
    assert meta["outcome"] == "captured" and meta["step_method"] == "time" and meta["profile"] == "complete"
    timings = meta["timings"]
    assert timings["capture_end"] - timings["capture_start"] >= 1.0
    facts = _facts(out)
    assert facts["steps.method"] == "time" and facts["phases.forward.ms"] > 0
    assert meta["wall_s"] < 60  # stopped after the window, not at the script's end


@pytest.mark.parametrize("mode", ["no_grad", "train"])
def test_an_inference_loop_steps_by_calls_of_the_model(tmp_path: Path, mode: str) -> None:
    """Under no_grad, or with autograd on in training mode where the model is called again with no backward."""
    cli, out = _diagnose(tmp_path, "model_only.py", "--wait", "2", "--warmup", "1", "--active", "4",
                         script_args=("--seconds", "60", *(("--train-mode",) if mode == "train" else ())))
    assert cli.code == 0, cli.output
    meta = _meta(out)
    assert (meta["outcome"], meta["step_method"], meta["profile"]) == ("captured", "module", "complete")
    assert meta["wall_s"] < 60  # stopped after the window
    facts = _facts(out)
    assert facts["steps.method"] == "module" and facts["steps.count"] == 4
    assert facts["workload.kind"] == "inference"
    assert facts["phases.forward.share"] > 0.3 and facts["phases.backward.ms"] == facts["phases.optimizer.ms"] == 0
    verdict = json.loads((out / "diagnoses.json").read_text())["verdict"]
    assert verdict["status"] != "inconclusive", verdict
    assert "each step is one call of the model" in (out / "report.md").read_text().replace("\n", " ")


def test_dataloader_workers_work_and_are_cleaned_up(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    cli, out = _diagnose(tmp_path, "workers.py", script_args=("--pids", str(pids)))
    assert cli.code == 0, cli.output
    meta = _meta(out)
    assert meta["outcome"] == "captured" and meta["step_method"] == "optimizer"
    facts = _facts(out)
    assert facts["steps.count"] == 5 and facts["phases.dataloader.ms"] > 0
    workers = [int(p.read_text()) for p in pids.glob("worker*.pid")]
    assert len(workers) == 2
    assert not [pid for pid in workers if _alive(pid)], "DataLoader workers were left running"


# stopping a script that hangs ------------------------------------------------------------

def test_timeout_stops_a_hanging_script_and_keeps_the_profile(tmp_path: Path) -> None:
    cli, out = _diagnose(tmp_path, "hang.py", "--timeout", "25", script_args=("--ready", str(tmp_path / "ready")))
    assert cli.code == 124, cli.output
    assert "stopped by --timeout" in cli.stderr
    meta = _meta(out)
    assert (meta["outcome"], meta["profile"]) == ("timeout", "partial")
    facts = _facts(out)
    assert facts["steps.count"] == 2 and facts["steps.incomplete"] == 1  # steps 8 and 9; it hangs in 10
    assert not _alive(meta["ranks"][0]["pid"])


def test_ctrl_c_stops_the_script_and_keeps_the_profile(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "advisor", "diagnose", str(SCRIPTS / "hang.py"), "--out", str(out), "-q",
         "--no-escalate", "--no-trial", "--", "--ready", str(ready)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ready.exists(), "the script never reached its hang"
        proc.send_signal(signal.SIGINT)  # what the terminal sends on Ctrl-C
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stdout + stderr
    assert "interrupted (Ctrl-C)" in stderr
    meta = _meta(out)
    assert (meta["outcome"], meta["profile"]) == ("interrupted", "partial")
    assert _facts(out)["steps.count"] == 2
    assert not _alive(meta["ranks"][0]["pid"])


# the run directory -----------------------------------------------------------------------

def test_run_metadata(tmp_path: Path) -> None:
    cli, out = _diagnose(tmp_path, "exit_zero.py", "--wait", "2", "--warmup", "1", "--active", "3")
    assert cli.code == 0, cli.output
    meta = _meta(out)
    assert meta["command"][1:3] == ["diagnose", str(SCRIPTS / "exit_zero.py")]
    assert meta["exit_code"] == 0 and meta["outcome"] == "captured"
    env = meta["environment"]
    for key in ("python", "torch", "cuda", "driver", "cpu", "gpus"):
        assert key in env, key
    assert env["python"] == ".".join(map(str, sys.version_info[:3]))
    assert env["threads"]["torch_num_threads"] >= 1
    assert meta["threads_at_capture"]["torch_num_threads"] >= 1
    expected = {"wait": 2, "warmup": 1, "active": 3, "step_method": "auto", "mode": "kineto", "timeout_s": None}
    assert {k: meta["profiler"][k] for k in expected} == expected
    timings = meta["timings"]
    assert 0 <= timings["script_start"] <= timings["first_step"] <= timings["capture_start"] < timings["capture_end"]
    assert timings["total_s"] >= timings["capture_end"]


# several ranks ----------------------------------------------------------------------------

@pytest.mark.whole_machine
def test_torchrun_two_ranks_name_the_straggler(tmp_path: Path) -> None:
    cli, out = _diagnose(tmp_path, "ddp_straggler.py", "--nproc-per-node", "2",
                         script_args=("--slow-rank", "1", "--delay-ms", "40"))
    assert cli.code == 0, cli.output
    meta = _meta(out)
    assert meta["outcome"] == "captured" and meta["nproc_per_node"] == 2
    assert [r["rank"] for r in meta["ranks"]] == [0, 1]
    assert all(r["outcome"] == "captured" and r["profile"] == "complete" for r in meta["ranks"])
    for rank in (0, 1):
        assert (out / "framework" / f"rank{rank}.pt.trace.json.gz").is_file()
    facts = _facts(out)
    assert facts["ranks.count"] == 2 and facts["ranks.straggler"] == 1
    rows = {r["rank"]: r for r in facts["ranks.step_ms"]}
    assert rows[0]["wait_ms"] > rows[1]["wait_ms"]  # the fast rank waits for the slow one
    assert rows[1]["busy_ms"] > rows[0]["busy_ms"]
    diagnoses = json.loads((out / "diagnoses.json").read_text())["diagnoses"]
    straggler = next(d for d in diagnoses if d["rule_id"] == "DIST001")
    assert straggler["where"].startswith("rank 1")
    # analysing the folder of rank traces again gives the same comparison
    again = run_cli("analyze", str(out / "framework"), "--out", str(tmp_path / "again"), "-q", cwd=tmp_path)
    assert again.code == 0, again.output
    assert _facts(tmp_path / "again")["ranks.straggler"] == 1


def test_advisor_is_put_on_the_script_path_only_when_python_would_not_find_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Installed (site-packages or editable .pth): nothing added. Elsewhere: added, and named for the bootstrap."""
    from advisor.collect import framework
    from advisor.collect.bootstrap import BOOTSTRAP_PATH_ENV

    monkeypatch.delenv("PYTHONPATH", raising=False)
    here = str(Path(framework.__file__).resolve().parents[2])
    assert framework._importable_without(here)  # this test process imported it without PYTHONPATH
    assert BOOTSTRAP_PATH_ENV not in framework.child_env()
    assert not framework._importable_without(str(tmp_path))  # a checkout Python would not find


def test_pythonpath_of_the_user_reaches_the_script_unchanged(tmp_path: Path) -> None:
    env = {**_launch_env(), "PYTHONPATH": str(tmp_path / "libs")}
    (tmp_path / "libs").mkdir()
    (tmp_path / "libs" / "helper_mod.py").write_text("VALUE = 42\n")
    script = tmp_path / "uses_helper.py"
    script.write_text(
        "import json, os, sys\nimport helper_mod\n"
        f"json.dump({{'value': helper_mod.VALUE, 'pythonpath': os.environ.get('PYTHONPATH')}}, "
        f"open({str(tmp_path / 'seen.json')!r}, 'w'))\n"
    )
    proc = subprocess.run([sys.executable, "-m", "advisor", "diagnose", str(script), "--out", str(tmp_path / "run"),
                           "-q", "--no-escalate", "--no-trial", "--steps", "time", "--window-start", "0", "--window", "0.1"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen == {"value": 42, "pythonpath": str(tmp_path / "libs")}, proc.stderr


# the steps after the window --------------------------------------------------------------

def test_the_steps_after_the_window_are_timed_without_the_profiler(tmp_path: Path) -> None:
    cli, out = _diagnose(tmp_path, "steps_then_slow.py")
    assert cli.code == 0, cli.output
    meta = _meta(out)
    assert (meta["outcome"], meta["profile"]) == ("captured", "complete")
    times = meta["unprofiled_step_ms"]
    assert len(times) == 5 and all(t > 0 for t in times), times  # as many as the window recorded
    assert meta["ranks"][0]["unprofiled_step_ms"] == times
    facts = _facts(out)
    assert facts["steps.unprofiled_count"] == 5
    assert facts["steps.unprofiled_ms"] == sorted(times)[2]
    assert facts["steps.profiler_overhead"] == pytest.approx(facts["steps.time_ms_median"] / facts["steps.unprofiled_ms"] - 1)
    assert "Without the profiler the steps took" in (out / "report.md").read_text()


def test_a_script_that_ends_among_the_unprofiled_steps_keeps_its_profile(tmp_path: Path) -> None:
    # steps 8-12 are recorded; the script ends after step 14, two steps into the unprofiled ones
    cli, out = _diagnose(tmp_path, "steps_then_slow.py", script_args=("--steps", "15"))
    assert cli.code == 0, cli.output
    meta = _meta(out)
    assert meta["profile"] == "complete" and meta["exit_code"] == 0
    assert len(meta["unprofiled_step_ms"]) == 2
    assert _facts(out)["steps.count"] == 5


def test_slow_steps_after_the_window_are_timed_for_as_long_as_the_window_took_at_most(tmp_path: Path) -> None:
    # the window's five steps take well under a second; the steps after it sleep 0.6 s each: the timing stops
    # after a second of them (its floor), not after five (3 s)
    start = time.monotonic()
    cli, out = _diagnose(tmp_path, "steps_then_slow.py", script_args=("--slow-from", "13", "--sleep", "0.6"))
    assert cli.code == 0, cli.output
    times = _meta(out)["unprofiled_step_ms"]
    assert 1 <= len(times) <= 2 and all(t >= 600 for t in times), times
    assert time.monotonic() - start < 60


@pytest.mark.whole_machine
def test_ranks_time_the_same_steps_after_the_window_so_none_is_left_waiting(tmp_path: Path) -> None:
    # The steps after the window are slow (rank 1 sleeps 0.7 s in each, and rank 0 waits for it): one rank
    # would stop timing after a second of them; with two, each stopping at its own clock would leave the other
    # in the next step's all-reduce. Both time the same five steps and end.
    cli, out = _diagnose(tmp_path, "ddp_straggler.py", "--nproc-per-node", "2",
                         script_args=("--delay-ms", "0", "--late-from", "13", "--late-delay-ms", "700"), timeout=180)
    assert cli.code == 0, cli.output
    meta = _meta(out)
    assert all(r["outcome"] == "captured" and r["profile"] == "complete" for r in meta["ranks"])
    assert [len(r["unprofiled_step_ms"]) for r in meta["ranks"]] == [5, 5]
    assert all(t >= 600 for r in meta["ranks"] for t in r["unprofiled_step_ms"])
