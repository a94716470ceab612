"""Imports every built-in analyzer module, so that each registers itself."""

from advisor.analyze import (  # noqa: F401
    dataloader,
    kernels,
    operators,
    optimizer,
    source_lines,
    step_split,
    trace_info,
)
