"""Optional parts of omlx: found without importing them, and a clear message when absent."""

from __future__ import annotations

import sys

import pytest

from omlx.errors import MissingExtra
from omlx.workers.extras import EMBEDDINGS, VLM, is_installed, require


def test_installed_modules_are_found_without_importing_them() -> None:
    assert is_installed("json") and not is_installed("no_such_module_for_omlx")


def test_a_missing_extra_names_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mlx_embeddings", None)
    with pytest.raises(MissingExtra) as caught:
        require(EMBEDDINGS, "my-encoder")
    assert "pip install 'omlx[embeddings]'" in caught.value.message
    assert "'my-encoder'" in caught.value.message
    monkeypatch.setitem(sys.modules, "mlx_vlm", None)
    with pytest.raises(MissingExtra, match=r"omlx\[vlm\]"):
        require(VLM, "v")
