"""`omlx pull`: import a GGUF, a local folder, or download from the hub."""

from __future__ import annotations

from omlx.cli.output import not_available


def pull() -> None:
    """Add a model to the store."""
    not_available("omlx pull", "issue 2")
