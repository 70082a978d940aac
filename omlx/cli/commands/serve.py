"""`omlx serve`: run the HTTP server."""

from __future__ import annotations

from omlx.cli.output import not_available


def serve() -> None:
    """Serve models over OpenAI- and Anthropic-compatible HTTP APIs."""
    not_available("omlx serve", "serving core, issue 3")
