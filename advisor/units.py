"""How numbers are written for people: durations, shares, counts and sizes.

Shared by rule templates, reports and the terminal card, so a figure reads
the same everywhere.
"""

from __future__ import annotations

__all__ = ["fmt_bytes", "fmt_ms", "fmt_num", "fmt_pct"]


def fmt_ms(value: float) -> str:
    """A duration given in ms: '1.23 s', '456 ms', '12.3 ms', '0.45 ms' -> '450 us'."""
    if abs(value) >= 1000:
        return f"{value / 1000:.2f} s"
    if abs(value) >= 100:
        return f"{value:.0f} ms"
    if abs(value) >= 1:
        return f"{value:.1f} ms"
    return f"{value * 1000:.0f} us"


def fmt_pct(value: float) -> str:
    """A fraction as a percentage: 0.423 -> '42%', 0.004 -> '0.4%'."""
    if abs(value) >= 0.01 or value == 0:
        return f"{value * 100:.0f}%"
    return f"{value * 100:.1f}%"


def fmt_num(value: float) -> str:
    """A count or plain number: 12345 -> '12,345', 3.14159 -> '3.14'."""
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def fmt_bytes(value: float) -> str:
    """A byte count: 1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
