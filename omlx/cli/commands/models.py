"""`omlx models`, `omlx pin`, `omlx unpin`."""

from __future__ import annotations

from omlx.cli.output import not_available


def list_models() -> None:
    """List the models in the store."""
    not_available("omlx models", "issue 2")


def pin() -> None:
    """Pin a model."""
    not_available("omlx pin", "issue 2")


def unpin() -> None:
    """Unpin a model."""
    not_available("omlx unpin", "issue 2")
