"""Runs for the report tests: a real run, made hostile or completed with the facts other stages will add.

``hostile_trace`` rewrites names in a real Kineto trace (an operator becomes
``<script>alert(1)</script>``, the source file gets quotes and a tag, a module
an ``onerror`` attribute), so ``advisor analyze`` carries them into every
report. ``enriched_run`` copies a real run and adds the facts the GPU, multi-rank
and workflow stages are to provide (kernels.top, gpu.*, ranks.*, the trail), with
hostile kernel names, plus a user rule that fires on them; the test then
re-renders it with ``advisor report``.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

EVIL_OP = "<script>alert(1)</script>"
EVIL_FILE = "we\"ird 'q' <b>x</b>.py"
EVIL_MODULE = "<img src=x onerror=alert(2)>"
TEMPLATE_KERNEL = "void at::native::vectorized_elementwise_kernel<4, at::native::AbsFunctor<float>, at::detail::Array<char*, 2> >(int, T&&)"

RULE = """\
id: KRN901
name: one-kernel-dominates
severity: high
when: kernels.top[0].share >= 0.3
impact:
  ms_per_step: kernels.top[0].ms * 0.5
  basis: half of the kernel's time, for a test
  confidence: low
what: "{{ kernels.top[0].name }} takes {{ pct(kernels.top[0].share) }} of the GPU time."
where: "{{ kernels.top[0].site }}; module {{ kernels.top[0].module }}"
why: The kernel is slow & the "why" has <angle brackets>.
fix: Look at the kernel; the fix text has a </td> in it.
fix_code: |
  # </pre><script>alert(3)</script>
  torch.backends.cudnn.benchmark = True
escalate: ncu
evidence: kernels.top
knowledge: [tiny-op-storm]
# a javascript: reference is refused when the rule loads (tests/engine), so the report never sees one
references: ["https://docs.nvidia.com/nsight-compute/"]
"""


def hostile_trace(trace: Path, dest: Path) -> Path:
    """A copy of a real trace with hostile operator, file and module names."""
    data = json.loads(gzip.decompress(trace.read_bytes()))
    for event in data.get("traceEvents", []):
        name = event.get("name", "")
        if name == "aten::convolution_backward":
            event["name"] = EVIL_OP
        elif name.startswith("advisor::src ") or name.startswith("advisor::module "):
            event["name"] = name.replace("slow_dataloader.py", EVIL_FILE).replace("Sequential.0", EVIL_MODULE)
    dest.write_bytes(gzip.compress(json.dumps(data).encode()))
    return dest


def _fact(name: str, value, unit: str) -> dict:  # noqa: ANN001
    return {"name": name, "value": value, "unit": unit, "source": "test (synthetic, shaped as issues 3/4 promise)"}


def enriched_run(real_run: Path, dest: Path) -> tuple[Path, Path]:
    """(run directory, user rules folder): a real run plus synthetic GPU, rank and workflow data."""
    shutil.copytree(real_run, dest)
    for stale in ("report.md", "report.html"):
        (dest / stale).unlink(missing_ok=True)
    findings = json.loads((dest / "findings.json").read_text())
    step = next(f["value"] for f in findings["facts"] if f["name"] == "steps.time_ms")
    kernels = [
        {"name": EVIL_OP, "ms": 0.4 * step, "share": 0.45, "calls_per_step": 2, "op": "aten::mm",
         "site": f"{EVIL_FILE}:12 (main)", "file": EVIL_FILE, "line": 12, "module": EVIL_MODULE},
        {"name": TEMPLATE_KERNEL, "ms": 0.2 * step, "share": 0.22, "calls_per_step": 40, "op": "aten::abs",
         "site": "train.py:30 (loss)", "file": "train.py", "line": 30, "module": "Model.head"},
        {"name": 'ampere_sgemm_128x64_nn & "quoted"', "ms": 0.1 * step, "share": 0.11, "calls_per_step": 4,
         "op": "aten::addmm", "site": "train.py:20 (forward)", "file": "train.py", "line": 20, "module": "Model.fc"},
    ]
    steps = [{"step": i, "busy_ms": 0.58 * step, "idle_ms": 0.42 * step} for i in range(3)]
    ranks = [{"rank": r, "step": s, "ms": step * (1.3 if r == 2 else 1.0) + s} for r in range(4) for s in range(3)]
    findings["facts"] = [f for f in findings["facts"] if f["name"] not in ("trace.has_gpu", "trace.device")] + [
        _fact("trace.has_gpu", True, "bool"), _fact("trace.device", "NVIDIA H100 <synthetic>", "text"),
        _fact("gpu.busy_fraction", 0.58, "fraction"), _fact("gpu.idle_fraction", 0.42, "fraction"),
        _fact("gpu.idle_ms", 0.42 * step, "ms"), _fact("gpu.steps", steps, "table"),
        _fact("kernels.top", kernels, "table"), _fact("ranks.step_ms", ranks, "table"),
        _fact("ranks.straggler", 2, "count"),
    ]
    (dest / "findings.json").write_text(json.dumps(findings))
    meta = json.loads((dest / "run.json").read_text())
    meta["trail"] = [
        {"stage": "framework", "status": "ran", "reason": "always the first stage", "command": "python train.py",
         "artifacts": ["framework/rank0.pt.trace.json.gz"]},
        {"stage": "system", "status": "not_needed", "reason": "gpu.idle_fraction 0.42 < 0.5", "command": None,
         "artifacts": []},
        {"stage": "kernel", "status": "ran", "reason": f"KRN901: {EVIL_OP} holds 45% of GPU time",
         "command": f"ncu --kernel-name regex:'{EVIL_OP}' python train.py", "artifacts": ["kernel/report.ncu-rep"]},
    ]
    meta["workflow"] = {
        "nodes": [{"id": "framework"}, {"id": "system"}, {"id": "kernel"}],
        "edges": [{"from": "framework", "to": "system", "guard": "gpu.idle_fraction >= 0.5", "taken": False},
                  {"from": "framework", "to": "kernel", "guard": "kernels.top[0].share >= 0.3", "taken": True}],
    }
    (dest / "run.json").write_text(json.dumps(meta))
    rules = dest.parent / f"{dest.name}-rules"
    rules.mkdir()
    (rules / "KRN901-one-kernel-dominates.yaml").write_text(RULE)
    return dest, rules
