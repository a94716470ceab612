"""bench/calibrate.py's table and the order of its runs (the benchmark itself takes minutes: bench/README.md)."""

from __future__ import annotations

import importlib.util
import json
import math
import statistics
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _load_calibrate():  # noqa: ANN202 - a module
    spec = importlib.util.spec_from_file_location("calibrate", REPO / "bench" / "calibrate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CALIBRATE = _load_calibrate()


def test_every_row_names_an_example_and_a_rule_file() -> None:
    rows = CALIBRATE.read_rows(CALIBRATE.TABLE)
    rule_ids = {path.name.split("-")[0] for path in (REPO / "rules").rglob("*.yaml")}
    assert len(rows) >= 17
    for row in rows:
        assert row["rule"] in rule_ids, row
        assert row["judge"] in CALIBRATE.JUDGES
        assert isinstance(row["pairs"], int) and row["pairs"] >= 0


@pytest.mark.parametrize("pairs", ["7", -1, 2.5, True])
def test_a_bad_pairs_value_names_the_file_and_the_row(tmp_path: Path, pairs: object) -> None:
    table = tmp_path / "table.yaml"
    table.write_text(json.dumps([{"example": "zeroed_grads.py", "rule": "OPT002", "pairs": pairs}]))
    with pytest.raises(SystemExit, match=r"table\.yaml: row 1 \(zeroed_grads\.py\): `pairs` must be"):
        CALIBRATE.read_rows(table)


def test_even_pairs_run_the_fixed_twin_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Alternating the order keeps a machine that speeds up (or slows down) during a pair out of the median gain;
    whichever runs first, the comparison is still slow against fixed."""
    calls: list[tuple[str, ...]] = []

    def advisor(*args: str, log: Path, env: dict[str, str] | None = None) -> None:
        calls.append(args)
        out = Path(args[args.index("--out") + 1])
        out.mkdir(parents=True, exist_ok=True)
        if args[0] == "diagnose":
            (out / "diagnoses.json").write_text(json.dumps({"diagnoses": []}))
        else:
            step = {"a": 20.0, "b": 17.0, "delta": -3.0, "significant": True,
                    "unprofiled": {"a": 18.0, "b": 15.5, "delta": -2.5}}
            gain = {"rule_id": "OPT002", "estimate_ms": 2.7, "target": None, "target_gain_ms": None}
            (out / "compare.json").write_text(json.dumps({"step": step, "gains": [gain]}))

    monkeypatch.setattr(CALIBRATE, "_advisor", advisor)
    row = {"example": "zeroed_grads.py", "rule": "OPT002", "fixed_args": ["--set-to-none"], "diagnose_args": [],
           "env": {}, "judge": "recorded", "pairs": 0}
    first = CALIBRATE.run_pair(row, tmp_path / "pair1", [])
    second = CALIBRATE.run_pair(row, tmp_path / "pair2", [], fixed_first=True)

    outs = [Path(c[c.index("--out") + 1]).name for c in calls]
    assert outs == ["slow", "fixed", "compare", "fixed", "slow", "compare"]
    assert calls[1][-2:] == ("--", "--set-to-none") and calls[3][-2:] == ("--", "--set-to-none")
    assert "--" not in calls[0] and "--" not in calls[4]
    assert calls[2][1:3] == (str(tmp_path / "pair1" / "slow"), str(tmp_path / "pair1" / "fixed"))
    assert calls[5][1:3] == (str(tmp_path / "pair2" / "slow"), str(tmp_path / "pair2" / "fixed"))
    assert (first["order"], second["order"]) == ("slow first", "fixed first")
    assert first["step_gain_ms"] == second["step_gain_ms"] == 3.0
    assert first["bare_gain_ms"] == 2.5


def _pair(gain: float, bare: float, fired: bool = True) -> dict:
    return {"fired": fired, "quiet_after": True, "estimate_ms": 2.5, "step_gain_ms": gain, "target": None,
            "target_gain_ms": None, "bare_gain_ms": bare, "bare_estimate_ms": 2.0}


def test_noise_is_the_standard_error_of_the_judged_error_and_ignores_one_wild_run() -> None:
    # estimate 2.5 ms: pair errors +25%, +14%, +39%, +19%, +32%
    steady = [_pair(g, g) for g in (2.0, 2.2, 1.8, 2.1, 1.9)]
    wild = steady[:4] + [_pair(0.1, 0.1)]  # +2400%
    row = {"example": "x.py", "rule": "OPT002", "judge": "recorded", "pairs": 0}
    errors = sorted(2.5 / g - 1 for g in (2.0, 2.2, 1.8, 2.1, 1.9))
    mad = sorted(abs(e - errors[2]) for e in errors)[2]
    assert CALIBRATE.summarise(row, steady)["noise"] == pytest.approx(1.2533 * 1.4826 * mad / 5 ** 0.5, rel=1e-9)
    assert CALIBRATE.summarise(row, wild)["noise"] < 0.15
    assert CALIBRATE.summarise(row, steady[:2])["noise"] is None  # too few pairs to say


def test_an_estimate_that_follows_a_moving_gain_is_not_noisy() -> None:
    """A slow disk makes both the checkpoint and its estimate larger: the gains scatter, the errors do not."""
    row = {"example": "x.py", "rule": "HOST003", "judge": "recorded", "pairs": 0}
    pairs = [{**_pair(g, g), "estimate_ms": 0.9 * g} for g in (30.0, 88.0, 45.0, 52.0, 35.0)]
    assert CALIBRATE.summarise(row, pairs)["noise"] == pytest.approx(0.0, abs=1e-12)


def test_a_noisy_row_gets_more_pairs_until_it_settles_or_hits_the_most() -> None:
    row = {"example": "x.py", "rule": "OPT002", "judge": "bare", "pairs": 0}
    noisy = [_pair(2.0, g) for g in (0.1, 3.0, -1.0)]
    settled = [_pair(2.0, g) for g in (2.0, 2.1, 1.9, 2.0)]
    assert CALIBRATE.needs_more(row, noisy, 0.15, 12)  # judged on the bare gains, which scatter
    assert not CALIBRATE.needs_more(row, settled, 0.15, 12)
    assert not CALIBRATE.needs_more(row, noisy, 0.15, 3)
    assert not CALIBRATE.needs_more(row, noisy[:2] + [_pair(2.0, 2.0, fired=False)], 0.15, 12)  # a fail already
    assert CALIBRATE.needs_more(row, noisy[:2], 0.15, 12)  # no noise figure yet


def test_a_row_within_one_standard_error_of_the_tolerance_gets_more_pairs_either_side() -> None:
    row = {"example": "x.py", "rule": "HOST001", "judge": "recorded", "pairs": 0}
    # estimate 13 ms: pair errors +30%, +18%, +44% (median +30%, noise about 12 points): one pair could turn it
    near_fail = [{**_pair(g, g), "estimate_ms": 13.0} for g in (10.0, 11.0, 9.0)]
    # pair errors -27%, -35%, -22% (noise about 5 points): a narrow pass, as undecided
    near_pass = [{**_pair(g, g), "estimate_ms": 13.0} for g in (17.8, 20.0, 16.7)]
    # pair errors +4%, 0%, +8%: far inside, however it moves
    inside = [{**_pair(g, g), "estimate_ms": 13.0} for g in (12.5, 13.0, 12.0)]
    for pairs in (near_fail, near_pass):
        summary = CALIBRATE.summarise(row, pairs)
        assert summary["noise"] <= 0.15 and abs(abs(summary["error"]) - 0.30) < summary["noise"]
        assert CALIBRATE.needs_more(row, pairs, 0.15, 12)
    assert CALIBRATE.summarise(row, inside)["noise"] <= 0.15
    assert not CALIBRATE.needs_more(row, inside, 0.15, 12)
    assert not CALIBRATE.needs_more(row, near_fail, 0.15, 3)  # the most still bounds it


def test_a_pair_whose_fix_gained_nothing_counts_as_an_overestimate() -> None:
    """Estimate 2.5 ms; gains 5, 4, 3.3, 3.1 and two that came out below zero (the fixed run was slower). As
    (estimate - measured) / measured those two read -225% and -350%, the most *under*estimated, and took the
    median to -44%; they overestimated, and ranked with their gains the median is the error at the median gain."""
    row = {"example": "x.py", "rule": "OPT002", "judge": "recorded", "pairs": 0}
    gains = (5.0, 4.0, 3.3, 3.1, -2.0, -1.0)
    pairs = [{**_pair(g, g), "estimate_ms": 2.5} for g in gains]
    summary = CALIBRATE.summarise(row, pairs)
    assert summary["error"] == pytest.approx(((2.5 / 3.3 - 1) + (2.5 / 3.1 - 1)) / 2)  # the 3rd and 4th gains
    assert summary["error"] == pytest.approx(2.5 / statistics.median(gains) - 1, abs=0.02)
    assert summary["noise"] is not None and summary["noise"] < 1
    assert CALIBRATE._error(2.5, 0.0) == math.inf and CALIBRATE._error(None, -1.0) is None
    most_lost = [{**_pair(g, g), "estimate_ms": 2.5} for g in (-1.0, -2.0, 0.0, 3.0)]
    assert CALIBRATE.summarise(row, most_lost)["error"] == math.inf
    assert CALIBRATE.summarise(row, most_lost)["result"] == "FAIL"
    assert CALIBRATE.summarise(row, most_lost)["noise"] is None


def test_pooled_runs_judge_each_row_over_all_their_pairs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two runs of one noisy row, each failing on its own (+60%, -50%), pass pooled: the estimate sat between."""
    row = {"example": "x.py", "rule": "OPT002", "judge": "recorded", "pairs": 0}
    over = [{**_pair(g, g), "estimate_ms": 2.5} for g in (1.5, 1.6, 1.4)]
    under = [{**_pair(g, g), "estimate_ms": 2.5} for g in (5.0, 4.9, 5.2)]
    files = []
    for name, pairs in (("a.json", over), ("b.json", under)):
        files.append(tmp_path / name)
        files[-1].write_text(json.dumps({"commit": "abc", "results": [CALIBRATE.summarise(row, pairs)]}))
    assert [CALIBRATE.summarise(row, p)["result"] for p in (over, under)] == ["FAIL", "FAIL"]
    pooled = CALIBRATE.pool_runs(files)
    assert len(pooled) == 1 and len(pooled[0]["pairs"]) == 6
    assert pooled[0]["error"] == CALIBRATE.summarise(row, over + under)["error"]
    assert pooled[0]["result"] == "PASS"
    out = capsys.readouterr().out
    assert f"{files[0]}: 0 of 1 rows pass on their own (abc" in out and "note:" not in out

    files[1].write_text(json.dumps({"results": [{**CALIBRATE.summarise(row, under), "judge": "bare"}]}))
    with pytest.raises(SystemExit, match=r"b\.json: x\.py \(OPT002\) is judged bare, and recorded"):
        CALIBRATE.pool_runs(files)
    files[1].write_text("{}")
    with pytest.raises(SystemExit, match=r"b\.json: not the --json output of a calibration run"):
        CALIBRATE.pool_runs(files)


def test_trials_are_read_back_from_run_directories_as_pairs(tmp_path: Path, capsys) -> None:
    """Every trial is an (estimate, measured) pair, kept in the run's diagnoses.json: calibrate --trials lists them."""
    run = tmp_path / "runs" / "a"
    run.mkdir(parents=True)
    measured = {"knob": "intra_op_threads", "gain_ms": 40.0, "spread_ms": 2.0, "pairs": 4}
    (run / "diagnoses.json").write_text(json.dumps({"diagnoses": [
        {"rule_id": "HOST001", "gain_source": "trial", "estimate_ms": 50.0, "impact_ms": 40.0, "measured": measured},
        {"rule_id": "CPU001", "gain_source": "estimate", "estimate_ms": None, "impact_ms": 3.0, "measured": None}]}))
    pairs = CALIBRATE.trial_pairs([tmp_path / "runs"])
    assert [(p["rule"], p["estimate_ms"], p["measured_ms"]) for p in pairs] == [("HOST001", 50.0, 40.0)]
    assert pairs[0]["error"] == pytest.approx(0.25)
    assert CALIBRATE.print_trials(pairs) == 0
    assert "1 of 1 estimates within +-30%" in capsys.readouterr().out
    assert CALIBRATE.print_trials([]) == 1
