"""The module boundaries of docs/architecture.md hold: `lint-imports` keeps every contract.

The contracts live in pyproject.toml under [tool.importlinter]. A second test copies the
package, plants imports that break the table, and checks that lint-imports reports them,
so a green first test is not an empty configuration.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(
    not LINT_IMPORTS.exists(), reason="import-linter is not installed (pip install -e '.[test]')"
)


def lint_imports(cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_import_contracts_are_kept() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


# Each planted module breaks one folder rule.
PLANTED = {
    "omlx/server/_probe_mlx.py": "import mlx.core\n",
    "omlx/server/_probe_internal.py": "from omlx.engine.text import stop_strings\n",
    "omlx/tui/_probe.py": "from omlx import settings\n",
    "omlx/cache/_probe.py": "from omlx.engine import api\n",
    "omlx/draft/_probe.py": "from omlx.engine import scheduling\n",
    "omlx/schemas/_probe.py": "from omlx import errors\n",
    "omlx/engine/text/parsers/_probe.py": "def later():\n    import mlx.core\n",
    "omlx/models/_probe.py": "from omlx.engine import commands\n",
    "omlx/engine/_probe_lm.py": "import mlx_lm.generate\n",
    "omlx/pool/_probe.py": "import mlx.core\n",
    "omlx/integrations/_probe.py": "from omlx.server import app\n",
}
EXPECTED = [
    "omlx.server is not allowed to import mlx",
    "omlx.server is not allowed to import omlx.engine.text",
    "omlx.tui is not allowed to import omlx.settings",
    "omlx.cache is not allowed to import omlx.engine",
    "omlx.draft is not allowed to import omlx.engine",
    "omlx.engine.text.parsers._probe -> mlx",
    "omlx.schemas is not allowed to import omlx.errors",
    "omlx.models is not allowed to import omlx.engine",
    "omlx.engine is not allowed to import mlx_lm",
    "omlx.pool is not allowed to import mlx",
    "omlx.integrations is not allowed to import omlx.server",
]


def test_contracts_catch_planted_violations(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "omlx", tmp_path / "omlx", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for rel, source in PLANTED.items():
        (tmp_path / rel).write_text(source)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}  # ahead of the editable install
    result = lint_imports(tmp_path, env)
    assert result.returncode != 0
    missing = [line for line in EXPECTED if line not in result.stdout]
    assert not missing, result.stdout[-8000:]
