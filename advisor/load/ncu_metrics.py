"""The Nsight Compute metrics the advisor reads, and how their units are normalised.

Nsight Compute names one quantity in several ways: a raw metric name
(``gpu__time_duration.sum``) on the raw page, in ``--metrics`` output and in
``.ncu-rep`` files, and a section label (``Duration`` under *GPU Speed Of Light
Throughput*) on the details page. Its unit depends on the version and on
``--print-units``: ``usecond``, ``us`` or ``ns``; ``Gbyte/second`` or
``byte/second``; ``cycle/nsecond`` or ``Ghz``.

:data:`CATALOGUE` declares, once, each column of the per-launch table: its
normalised unit and where it can come from (raw names first, then details
labels). :func:`normalise` turns a value and its printed unit into the
normalised unit:

==========  ===================================================================
unit        what
==========  ===================================================================
ns          durations (from ns/nsecond/us/usecond/ms/msecond/s/second)
bytes       sizes, per block or not (from byte/Kbyte/Mbyte/Gbyte/Tbyte, KB...)
hz          clock rates (from hz/Khz/Mhz/Ghz and cycle/nsecond, cycle/usecond...)
bytes/s     bandwidths (from byte/second, Gbyte/s, ...)
pct         percent, 0 to 100 (from %)
count       cycles, instructions, warps, blocks, sectors, requests, plain numbers
text        strings (cache configuration, names)
==========  ===================================================================

Thousands separators (``13,485``) are removed and ``n/a`` becomes NaN.
Stall reasons are matched by pattern and become ``stall_<reason>`` columns; tensor-path math ops become
``tensor_ops_<path>`` columns.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = ["CATALOGUE", "STALL_PATTERN", "TENSOR_OPS_PATTERN", "Metric", "normalise", "parse_number", "unit_scale"]


@dataclass(frozen=True)
class Metric:
    """One column of the per-launch table."""

    column: str
    unit: str
    meaning: str
    raw: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()


def _m(column: str, unit: str, meaning: str, raw: str | tuple[str, ...] = (), labels: str | tuple[str, ...] = ()
       ) -> Metric:
    return Metric(column, unit, meaning, (raw,) if isinstance(raw, str) else raw,
                  (labels,) if isinstance(labels, str) else labels)


#: Every metric the analyzers may read. The order of ``raw``/``labels`` is the order of preference.
CATALOGUE: tuple[Metric, ...] = (
    # speed of light
    _m("duration_ns", "ns", "kernel duration", "gpu__time_duration.sum", "Duration"),
    _m("elapsed_cycles", "count", "elapsed GPU cycles", "gpc__cycles_elapsed.max", "Elapsed Cycles"),
    _m("sm_active_cycles", "count", "cycles with at least one warp on an SM, averaged over SMs",
       "sm__cycles_active.avg", "SM Active Cycles"),
    _m("sm_hz", "hz", "SM clock during the kernel",
       ("smsp__cycles_elapsed.avg.per_second", "sm__cycles_elapsed.avg.per_second", "gpc__cycles_elapsed.avg.per_second"),
       "SM Frequency"),
    _m("dram_hz", "hz", "DRAM clock during the kernel", "dram__cycles_elapsed.avg.per_second", "DRAM Frequency"),
    _m("sm_pct", "pct", "compute (SM) throughput, % of peak", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
       ("Compute (SM) Throughput", "Compute (SM) [%]", "SM [%]")),
    _m("mem_pct", "pct", "memory throughput (the busiest memory unit), % of peak",
       "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", ("Memory Throughput", "Memory [%]")),
    _m("dram_pct", "pct", "DRAM throughput, % of peak",
       ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
       "DRAM Throughput"),
    _m("l1_pct", "pct", "L1/TEX cache throughput, % of peak", "l1tex__throughput.avg.pct_of_peak_sustained_active",
       "L1/TEX Cache Throughput"),
    _m("l2_pct", "pct", "L2 cache throughput, % of peak", "lts__throughput.avg.pct_of_peak_sustained_elapsed",
       "L2 Cache Throughput"),
    # memory
    _m("dram_bytes_per_s", "bytes/s", "DRAM bandwidth achieved", "dram__bytes.sum.per_second", "Memory Throughput"),
    _m("dram_read_bytes", "bytes", "bytes read from DRAM", "dram__bytes_read.sum"),
    _m("dram_write_bytes", "bytes", "bytes written to DRAM", "dram__bytes_write.sum"),
    _m("dram_peak_bytes_per_cycle", "count", "DRAM peak bytes per DRAM cycle", "dram__bytes.sum.peak_sustained"),
    _m("l1_hit_pct", "pct", "L1/TEX hit rate", "l1tex__t_sector_hit_rate.pct", "L1/TEX Hit Rate"),
    _m("l2_hit_pct", "pct", "L2 hit rate", "lts__t_sector_hit_rate.pct", "L2 Hit Rate"),
    _m("gld_sectors", "count", "global load sectors", "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"),
    _m("gld_requests", "count", "global load requests", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"),
    _m("gst_sectors", "count", "global store sectors", "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"),
    _m("gst_requests", "count", "global store requests", "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"),
    _m("l2_global_sectors", "count", "L2 sectors of global accesses, as addressed",
       "memory_l2_theoretical_sectors_global"),
    _m("l2_global_sectors_ideal", "count", "L2 sectors those accesses would need if fully coalesced",
       "memory_l2_theoretical_sectors_global_ideal"),
    _m("smem_wavefronts", "count", "shared-memory wavefronts", "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum"),
    _m("smem_excess_wavefronts", "count", "shared-memory wavefronts beyond the ideal (bank conflicts)",
       "derived__memory_l1_wavefronts_shared_excessive"),
    _m("smem_conflicts_ld", "count", "shared-memory load bank conflicts",
       "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"),
    _m("smem_conflicts_st", "count", "shared-memory store bank conflicts",
       "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"),
    _m("smem_wavefronts_ld", "count", "shared-memory load wavefronts",
       "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"),
    _m("smem_wavefronts_st", "count", "shared-memory store wavefronts",
       "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"),
    # launch
    _m("block_size", "count", "threads per block", "launch__block_size", "Block Size"),
    _m("grid_size", "count", "blocks in the grid", "launch__grid_size", "Grid Size"),
    _m("threads", "count", "threads in the launch", "launch__thread_count", "Threads"),
    _m("registers_per_thread", "count", "registers per thread", "launch__registers_per_thread",
       "Registers Per Thread"),
    _m("smem_static_bytes", "bytes", "static shared memory per block", "launch__shared_mem_per_block_static",
       "Static Shared Memory Per Block"),
    _m("smem_dynamic_bytes", "bytes", "dynamic shared memory per block", "launch__shared_mem_per_block_dynamic",
       "Dynamic Shared Memory Per Block"),
    _m("waves_per_sm", "count", "waves of blocks per SM", "launch__waves_per_multiprocessor", "Waves Per SM"),
    _m("sm_count", "count", "streaming multiprocessors", ("device__attribute_multiprocessor_count", "launch__sm_count"),
       "# SMs"),
    # occupancy
    _m("block_limit_sm", "count", "blocks per SM allowed by the SM's block slots", "launch__occupancy_limit_blocks",
       "Block Limit SM"),
    _m("block_limit_registers", "count", "blocks per SM allowed by registers", "launch__occupancy_limit_registers",
       "Block Limit Registers"),
    _m("block_limit_shared_mem", "count", "blocks per SM allowed by shared memory",
       "launch__occupancy_limit_shared_mem", "Block Limit Shared Mem"),
    _m("block_limit_warps", "count", "blocks per SM allowed by warp slots", "launch__occupancy_limit_warps",
       "Block Limit Warps"),
    _m("block_limit_barriers", "count", "blocks per SM allowed by barriers", "launch__occupancy_limit_barriers",
       "Block Limit Barriers"),
    _m("theoretical_occ_pct", "pct", "theoretical occupancy", "sm__maximum_warps_per_active_cycle_pct",
       "Theoretical Occupancy"),
    _m("achieved_occ_pct", "pct", "achieved occupancy", "sm__warps_active.avg.pct_of_peak_sustained_active",
       "Achieved Occupancy"),
    _m("max_warps_per_sm", "count", "warp slots per SM", "device__attribute_max_warps_per_multiprocessor"),
    # scheduler and warp state
    _m("issue_active_pct", "pct", "cycles in which a scheduler issued an instruction",
       "smsp__issue_active.avg.pct_of_peak_sustained_active", ("Issue Slots Busy", "One or More Eligible")),
    _m("eligible_warps", "count", "eligible warps per scheduler per cycle",
       "smsp__warps_eligible.avg.per_cycle_active", "Eligible Warps Per Scheduler"),
    _m("warp_cycles_per_issue", "count", "cycles between two issued instructions of a warp",
       "smsp__average_warp_latency_per_inst_issued.ratio", "Warp Cycles Per Issued Instruction"),
    # floating point
    _m("fp64_pipe_pct", "pct", "FP64 pipe busy, % of peak", "sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_elapsed"),
    _m("dadd_per_cycle", "count", "FP64 adds per cycle (all SMs)",
       "smsp__sass_thread_inst_executed_op_dadd_pred_on.sum.per_cycle_elapsed"),
    _m("dmul_per_cycle", "count", "FP64 multiplies per cycle",
       "smsp__sass_thread_inst_executed_op_dmul_pred_on.sum.per_cycle_elapsed"),
    _m("dfma_per_cycle", "count", "FP64 FMAs per cycle",
       "smsp__sass_thread_inst_executed_op_dfma_pred_on.sum.per_cycle_elapsed"),
    _m("fadd_per_cycle", "count", "FP32 adds per cycle",
       "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum.per_cycle_elapsed"),
    _m("fmul_per_cycle", "count", "FP32 multiplies per cycle",
       "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum.per_cycle_elapsed"),
    _m("ffma_per_cycle", "count", "FP32 FMAs per cycle",
       "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed"),
    _m("hadd_per_cycle", "count", "FP16 adds per cycle",
       "smsp__sass_thread_inst_executed_op_hadd_pred_on.sum.per_cycle_elapsed"),
    _m("hmul_per_cycle", "count", "FP16 multiplies per cycle",
       "smsp__sass_thread_inst_executed_op_hmul_pred_on.sum.per_cycle_elapsed"),
    _m("hfma_per_cycle", "count", "FP16 FMAs per cycle",
       "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum.per_cycle_elapsed"),
    _m("dfma_peak_per_cycle", "count", "peak FP64 FMAs per cycle",
       "sm__sass_thread_inst_executed_op_dfma_pred_on.sum.peak_sustained"),
    _m("ffma_peak_per_cycle", "count", "peak FP32 FMAs per cycle",
       "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained"),
    # FLOPs counted by the kernel, where the collection asked for them (``--metrics``): ncu's
    # nvprof-style counts per precision, and the math ops of the tensor-core path
    _m("flop_count_dp", "count", "FP64 floating-point operations", ("flop_count_dp.sum", "flop_count_dp")),
    _m("flop_count_sp", "count", "FP32 floating-point operations", ("flop_count_sp.sum", "flop_count_sp")),
    _m("flop_count_hp", "count", "FP16 floating-point operations", ("flop_count_hp.sum", "flop_count_hp")),
    _m("fp32_to_fp64_ratio", "count", "device: FP32 to FP64 throughput ratio",
       "device__attribute_single_to_double_precision_perf_ratio"),
    # device
    _m("device_name", "text", "GPU name", "device__attribute_display_name"),
    _m("cc_major", "count", "compute capability, major", "device__attribute_compute_capability_major"),
    _m("cc_minor", "count", "compute capability, minor", "device__attribute_compute_capability_minor"),
)

#: ``smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio``: cycles per issued
#: instruction that a warp spends stalled for <reason>; they add up to warp_cycles_per_issue.
STALL_PATTERN = re.compile(r"^smsp__average_warps_issue_stalled_(?P<reason>\w+?)_per_issue_active\.ratio$")

#: ``sm__ops_path_tensor_src_<in>[_dst_<out>].sum``: math operations executed on the tensor-core path for one
#: pair of data types (NVIDIA's answer for counting a tensor-core kernel's FLOPs); they become
#: ``tensor_ops_<in>[_dst_<out>]`` columns. The sparsity_on/off splits are parts of the same count and are left out.
TENSOR_OPS_PATTERN = re.compile(r"^sm__ops_path_tensor_(?P<path>src_\w+?)\.sum$")

_TIME = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9}
_PREFIX = {"": 1.0, "K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_BYTES = re.compile(r"^(?P<p>[KkMGT]?)(?:byte|B)$")
_HZ = re.compile(r"^(?P<p>[KkMGT]?)hz$", re.IGNORECASE)
_PER_TIME = {"second": 1.0, "s": 1.0, "msecond": 1e-3, "ms": 1e-3, "usecond": 1e-6, "us": 1e-6,
             "nsecond": 1e-9, "ns": 1e-9}


def unit_scale(unit: str) -> tuple[float, str]:
    """(factor, normalised unit) for a unit as ncu prints it; unknown units pass through (1, ``count``)."""
    unit = unit.strip()
    if unit == "%":
        return 1.0, "pct"
    if unit in _TIME:
        return _TIME[unit], "ns"
    num, _, den = unit.partition("/")
    hz = _HZ.match(num)
    if hz and not den:
        return _PREFIX[hz["p"].upper() if hz["p"] == "k" else hz["p"]], "hz"
    size = _BYTES.match(num)
    if size:
        factor = _PREFIX[size["p"]]
        if den in _PER_TIME:
            return factor / _PER_TIME[den], "bytes/s"
        return factor, "bytes"  # bytes, or bytes per block/thread: the size is what we keep
    if num == "cycle" and den in _PER_TIME:
        return 1.0 / _PER_TIME[den], "hz"
    if den in _PER_TIME:  # sector/nsecond, inst/second...: a rate per second
        return 1.0 / _PER_TIME[den], "count"
    # Some derived metrics print a size prefix on a count (3.145728 Mbyte of sectors): the
    # prefix still scales; plain counts (cycle, inst, warp, block, sector...) pass through.
    return 1.0, "count"


def parse_number(text: str) -> float | None:
    """``"13,485"`` -> 13485.0; ``"n/a"``, ``""`` and words -> None."""
    cleaned = text.strip().replace(",", "")
    if not cleaned:
        return None
    try:
        value = float(cleaned)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def normalise(value: str, unit: str) -> tuple[float | str | None, str]:
    """A printed value and unit -> (value in the normalised unit, that unit); text stays text."""
    number = parse_number(value)
    if number is None:
        text = value.strip()
        return (None, "count") if text.lower() in ("", "n/a", "nan") else (text, "text")
    factor, norm = unit_scale(unit)
    return number * factor, norm
