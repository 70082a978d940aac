"""Human-readable numbers for the dashboard and batch frames."""

from __future__ import annotations


def human_bytes(n: int | float | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def rate(tps: float) -> str:
    return f"{tps:,.1f} tok/s"


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def percent(part: int, whole: int) -> str:
    return "-" if whole <= 0 else f"{100.0 * part / whole:.0f}%"
