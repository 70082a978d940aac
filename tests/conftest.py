"""Test-wide isolation: every test gets its own OMLX_HOME and no stray OMLX_* settings."""

from __future__ import annotations

import os

import pytest

SOAK = os.environ.get("OMLX_SOAK") == "1"  # read before the autouse fixture clears OMLX_*

# pytest-xdist's workers start with COLUMNS=80 set (a plain pytest run has none), and a
# Rich console made at import keeps the width it found then: the CLI tests, which pass
# their own COLUMNS, would see tables cut at 80 columns.
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)


def pytest_collection_modifyitems(config, items):
    """`soak` tests (minutes each) run only with OMLX_SOAK=1: the slow tier."""
    if SOAK:
        return
    skip = pytest.mark.skip(reason="soak tier: set OMLX_SOAK=1 to run")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)


pytest_plugins = [
    "tests.fixtures.blas_plugin",
    "tests.fixtures.tiny_plugin",
    "tests.fixtures.real_models",
]


@pytest.fixture(autouse=True)
def _isolated_omlx_home(tmp_path, monkeypatch):
    for key in list(os.environ):
        if key.startswith("OMLX_"):
            monkeypatch.delenv(key)
    home = tmp_path / "omlx-home"
    home.mkdir()
    monkeypatch.setenv("OMLX_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    return home
