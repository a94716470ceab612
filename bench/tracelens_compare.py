"""ops.efficiency against TraceLens, per category: how close the operator model comes to the peer's figures.

For each of the TraceLens fixtures (``../shared/fixtures/tracelens/mi300x/*``: eight real MI300X traces with
the perf-report CSVs TraceLens produced from them), every row of the peer's GEMM, SDPA_fwd, CONV_fwd,
CONV_bwd and Normalization CSVs is paired with the advisor's ``ops.efficiency`` row of the same (operator,
Input Dims, Concrete Inputs), over every kernel of the trace, as ``tests/analyze/test_roofline.py`` does.
Per category it prints the (operator, shape) rows compared and the largest relative error of FLOPs per
call, bytes per call and achieved TFLOP/s (the peer's FLOPs per call x calls / its summed kernel time).

Documented differences of definition are applied, not hidden: ``aten::convolution_backward`` with
``output_mask = [False, True, False]`` (no grad_input) is modelled at half the peer's figures, and the
composite ``aten::layer_norm`` / ``aten::batch_norm`` rows (whose kernels belong to the native op inside
them) have no row here; both are counted in the table's last columns.

    python bench/tracelens_compare.py            # Markdown table on stdout
    python bench/tracelens_compare.py --json out.json
"""

from __future__ import annotations

import argparse
import ast
import csv
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO.parent / "shared" / "fixtures" / "tracelens" / "mi300x"
PEER_CSVS = ("GEMM.csv", "SDPA_fwd.csv", "CONV_fwd.csv", "CONV_bwd.csv", "Normalization.csv")
COMPOSITE = {"aten::layer_norm", "aten::batch_norm"}


def _json(text: str) -> str:
    """A CSV cell (a Python literal) as the trace's compact JSON text."""
    return json.dumps(ast.literal_eval(text), separators=(",", ":"), ensure_ascii=False)


def peer_rows(folder: Path) -> dict[tuple[str, str, str], dict[str, Any]]:
    """TraceLens's rows summed per (name, dims, concrete inputs): calls, kernel us, FLOPs and bytes per call."""
    out: dict[tuple[str, str, str], dict[str, Any]] = defaultdict(lambda: {"us": 0.0, "calls": 0})
    for name in PEER_CSVS:
        path = folder / name
        if not path.exists():
            continue
        with path.open(newline="") as f:
            for r in csv.DictReader(f):
                row = out[(r["name"], _json(r["Input Dims_first"]), _json(r["Concrete Inputs_first"]))]
                row["us"] += float(r["Kernel Time (µs)_sum"])
                row["calls"] += int(r["name_count"])
                row["flops"] = float(r["GFLOPS_first"]) * 1e9
                row["bytes"] = float(r["Data Moved (MB)_first"]) * 2**20
    return dict(out)


def masked_conv_bwd(op: str, concrete: str) -> bool:
    """A convolution backward that computes no grad_input (the model counts half the peer's work)."""
    return op == "aten::convolution_backward" and json.loads(concrete)[10].startswith("[False")


def compare(folders: list[Path]) -> list[dict[str, Any]]:
    """One record per peer row: trace, category, and the relative errors of FLOPs, bytes and TFLOP/s."""
    from advisor.analyze.framework.roofline import device_spec, efficiency_frame
    from advisor.analyze.framework.view import TraceView
    from advisor.load.kineto import load_kineto

    out = []
    for folder in folders:
        view = TraceView(load_kineto(folder / "trace.json.gz"))
        spec, _ = device_spec(view)
        table = efficiency_frame(view, spec, view.gpu.ops)
        ours = {(r.op, r.shape, r.concrete): r for r in table.itertuples()}
        for key, peer in peer_rows(folder).items():
            o = ours.get(key)
            row: dict[str, Any] = {"trace": folder.name, "op": key[0], "shape": key[1], "composite": key[0] in COMPOSITE}
            if o is None or row["composite"]:
                row.update(category="(composite)" if row["composite"] else "(missing)")
                out.append(row)
                continue
            factor = 0.5 if masked_conv_bwd(o.op, o.concrete) else 1.0
            peer_tflops = peer["flops"] * peer["calls"] / (peer["us"] * 1e-6) / 1e12
            row.update(category=o.category, masked=factor != 1.0,
                       flops_err=o.flops / (factor * peer["flops"]) - 1, bytes_err=o.bytes / (factor * peer["bytes"]) - 1,
                       tflops_err=o.tflops_s / (factor * peer_tflops) - 1)
            out.append(row)
    return out


def by_category(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per category: rows compared, the largest |error| of each figure, rows with a documented difference."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[r["category"]].append(r)
    out = []
    for cat in sorted(groups, key=lambda c: (c.startswith("("), c)):
        part = groups[cat]
        compared = [r for r in part if "flops_err" in r]
        out.append({"category": cat, "rows": len(compared) if compared else len(part),
                    "traces": len({r["trace"] for r in part}),
                    **{f"max_{k}": max((abs(r[f"{k}_err"]) for r in compared), default=None)
                       for k in ("flops", "bytes", "tflops")},
                    "masked": sum(1 for r in compared if r.get("masked"))})
    return out


def markdown(table: list[dict[str, Any]]) -> str:
    def pct(v: float | None) -> str:
        return "" if v is None else f"{100 * v:.2g}%"

    lines = ["| category | (op, shape) rows | traces | max abs FLOPs err | max abs bytes err | max abs TFLOP/s err "
             "| rows at half (masked conv bwd) |", "|---|---:|---:|---:|---:|---:|---:|"]
    for t in table:
        lines.append(f"| {t['category']} | {t['rows']} | {t['traces']} | {pct(t['max_flops'])} | {pct(t['max_bytes'])} "
                     f"| {pct(t['max_tflops'])} | {t['masked']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fixtures", type=Path, default=FIXTURES, help="folder of the TraceLens fixtures")
    parser.add_argument("--json", type=Path, help="also write the per-row errors and the table as JSON")
    args = parser.parse_args(argv)
    folders = sorted(p for p in args.fixtures.iterdir() if (p / "trace.json.gz").exists() and
                     any((p / c).exists() for c in PEER_CSVS))
    rows = compare(folders)
    table = by_category(rows)
    print(f"{len(rows)} TraceLens rows from {len(folders)} traces ({', '.join(p.name for p in folders)})\n")
    print(markdown(table))
    print("\n(composite): aten::layer_norm / aten::batch_norm rows, whose kernels the native op inside them holds; "
          "(missing): peer rows with no advisor row (none expected).")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "table": table}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
