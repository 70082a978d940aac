"""`omlx bench`: load-test a server."""

from __future__ import annotations

from omlx.cli.output import not_available


def bench() -> None:
    """Benchmark a server: TTFT, inter-token latency and tokens/s across concurrency levels."""
    not_available("omlx bench", "serving core, issue 3")
