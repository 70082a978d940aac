"""Test-wide isolation: every test gets its own OMLX_HOME and no stray OMLX_* settings."""

from __future__ import annotations

import os

import pytest

SOAK = os.environ.get("OMLX_SOAK") == "1"  # read before the autouse fixture clears OMLX_*
# The slow tier (real agent CLIs, the browser, the real model's long structured runs, the
# longest statistical and training runs) out of a plain run: 424 s of tests on 2 cores
# against 863-987 s with it;
# CI (CI=true) runs it, as does OMLX_SLOW=1 or `-m slow`.
SLOW = os.environ.get("CI", "").lower() in {"1", "true"} or os.environ.get("OMLX_SLOW") == "1"

# pytest-xdist's workers start with COLUMNS=80 set (a plain pytest run has none), and a
# Rich console made at import keeps the width it found then: the CLI tests, which pass
# their own COLUMNS, would see tables cut at 80 columns.
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)


def pytest_collection_modifyitems(config, items):
    """`soak` tests (minutes each) run only with OMLX_SOAK=1; `slow` ones in CI (see SLOW)."""
    slow = SLOW or "slow" in (config.getoption("markexpr") or "")
    skip_soak = pytest.mark.skip(reason="soak tier: set OMLX_SOAK=1 to run")
    skip_slow = pytest.mark.skip(reason="slow tier: runs in CI (CI=true) or with OMLX_SLOW=1")
    for item in items:
        if "soak" in item.keywords and not SOAK:
            item.add_marker(skip_soak)
        elif "slow" in item.keywords and not slow:
            item.add_marker(skip_slow)


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
