"""The built-in analyzer modules of each stage, imported when the stage is analysed, so that each registers itself.

Analyzers run, and their findings are listed, in the order they register. This
list keeps the order the modules had when analyze/ was one flat folder
(alphabetical by their old names: ``gpu_ranks`` for :mod:`.ranks.gpu`,
``system_gpu`` for :mod:`.system.gpu_gaps`, ...), so that ``findings.json``
stays as it was; a module that imports another analyzer module registers
after it (``comm`` after ``gpu_time``).
"""

from importlib import import_module

#: each stage's analyzer modules, in the order they register; a stage's modules are imported when that stage is
#: analysed (a Kineto trace needs neither the Nsight Systems tables nor sqlite3: 20 ms of every `advisor analyze`)
MODULES: dict[str, tuple[str, ...]] = {
    "framework": tuple(f"advisor.analyze.{m}" for m in (
        "framework.attention",
        "ranks.comm", "ranks.comm_sizes", "ranks.nccl_bandwidth",
        "framework.compiled", "framework.conv_layout", "framework.copies", "framework.data_quality",
        "framework.dataloader",
        "ranks.ddp_sync",
        "framework.elementwise", "framework.gpu_kernels", "framework.gpu_memory",
        "ranks.gpu",
        "framework.gpu_time", "framework.host", "framework.host_events",
        "framework.launch", "framework.layout_copies", "framework.memory_churn", "framework.operators",
        "framework.optimizer",
        "framework.precision",
        "framework.roofline",
        "framework.elementwise_runs", "framework.fp32_gemms", "framework.gemm_alignment",
        "ranks.host", "ranks.pool_waits",
        "framework.source_lines", "framework.step_split", "framework.sync_causes", "framework.syncs",
        "ranks.skew", "ranks.work",
        "framework.trace_info", "framework.workload", "framework.zero_grad",
    )),
    "kernel": ("advisor.analyze.kernel.kernels",),
    "trial": ("advisor.analyze.trial.gains",),
    "system": tuple(f"advisor.analyze.system.{m}" for m in ("cuda_api", "gpu_gaps", "kernels", "osrt", "timeline")),
}


def load(stage: str | None = None) -> None:
    """Import the analyzer modules of ``stage`` (None: of every stage), so that each registers itself."""
    for name in MODULES if stage is None else (stage,):
        for module in MODULES.get(name, ()):
            import_module(module)
