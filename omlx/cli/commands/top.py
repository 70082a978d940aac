"""`omlx top`: terminal dashboard."""

from __future__ import annotations

from omlx.cli.output import not_available


def top() -> None:
    """Watch a running server: throughput, cache hits, memory, models."""
    not_available("omlx top", "issue 8")
