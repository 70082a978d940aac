"""Every pure-Python module imports with MLX made unimportable (docs/architecture.md).

One subprocess per package group: `sys.modules[name] = None` for mlx, mlx_lm, mlx_vlm and
mlx_embeddings, then each module is imported on its own so a failure names the module and
the error. Packages that are pure as a whole (server, pool, models, tui, loadgen, schemas) are
discovered from the file tree, so a new module is covered without editing this list; in
omlx.cache, omlx.engine and omlx.platform only the named modules may need MLX. The static
twin of this test is the "no MLX" contract in pyproject.toml (tests/unit/test_import_contracts.py),
which also sees function-level imports.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCKED = ("mlx", "mlx_lm", "mlx_vlm", "mlx_embeddings")

# The cache's documented MLX modules: KV slicing/rebuild (kv_blocks) and the per-model view
# that runs on the engine thread (model_cache). Everything else in omlx.cache is pure.
CACHE_MLX_MODULES = {"omlx.cache.kv_blocks", "omlx.cache.model_cache"}

# The engine's MLX modules: the loop's backend and what only it runs. The loop itself and
# everything else in omlx.engine imports without MLX.
ENGINE_MLX_MODULES = {
    "omlx.engine.mlx_backend",
    "omlx.engine.sampling",
    "omlx.engine.loading",
    "omlx.engine.grammar_mask",
}
# models: the GGUF importer reads and writes tensors with MLX; the store itself needs none.
PLATFORM_MLX_MODULES = {"omlx.platform.weight_layout", "omlx.platform.cpu_precision"}
DRAFT_PURE = ["omlx.draft.accept", "omlx.draft.config", "omlx.draft.stats", "omlx.draft.stopping"]
LEAVES = ["omlx.settings", "omlx.errors"]


def modules_under(package: str) -> list[str]:
    """Dotted names of a package and every module below it, read from the file tree."""
    base = ROOT.joinpath(*package.split("."))
    names = []
    for path in sorted(base.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.append(".".join(parts))
    return names


GROUPS: dict[str, list[str]] = {
    "cache": [m for m in modules_under("omlx.cache") if m not in CACHE_MLX_MODULES],
    "engine": [m for m in modules_under("omlx.engine") if m not in ENGINE_MLX_MODULES],
    "pool": modules_under("omlx.pool"),
    "models": [m for m in modules_under("omlx.models") if not m.startswith("omlx.models.gguf")],
    "platform": [m for m in modules_under("omlx.platform") if m not in PLATFORM_MLX_MODULES],
    "draft": DRAFT_PURE,
    "server": modules_under("omlx.server"),
    "tui": modules_under("omlx.tui"),
    "loadgen": modules_under("omlx.loadgen"),
    "leaves": modules_under("omlx.schemas") + LEAVES,
}

# A module whose docstring says it is pure Python or MLX-free is held to it.
CLAIM = re.compile(r"pure[- ]python|no mlx|without mlx|mlx[- ]free", re.IGNORECASE)


def modules_claiming_purity() -> list[str]:
    claimed = []
    for module in modules_under("omlx"):
        path = ROOT.joinpath(*module.split("."))
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        if CLAIM.search(doc):
            claimed.append(module)
    return claimed


GROUPS["declared"] = modules_claiming_purity()

PROBE = """
import importlib, json, sys
for name in {blocked!r}:
    sys.modules[name] = None
failures = {{}}
for module in sys.argv[1:]:
    try:
        importlib.import_module(module)
    except Exception as exc:
        failures[module] = f"{{type(exc).__name__}}: {{exc}}"
loaded = sorted(
    m for m, mod in sys.modules.items()
    if mod is not None and m.split(".")[0] in {blocked!r}
)
print(json.dumps({{"failures": failures, "loaded": loaded}}))
"""


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_group_imports_without_mlx(group: str) -> None:
    modules = GROUPS[group]
    assert modules, f"no modules found for {group}"
    result = subprocess.run(
        [sys.executable, "-c", PROBE.format(blocked=BLOCKED), *modules],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["failures"] == {}, "modules that need MLX to import: " + json.dumps(
        report["failures"], indent=2
    )
    assert report["loaded"] == []


def test_discovery_sees_the_packages() -> None:
    # Guards the file-tree walk: a wrong ROOT would silently make every group tiny.
    assert "omlx.server.app" in GROUPS["server"]
    assert "omlx.cache.chain_hash" in GROUPS["cache"]
    assert "omlx.engine.text.parsers.factory" in GROUPS["engine"]
    assert "omlx.schemas.stats" in GROUPS["leaves"]
    assert not CACHE_MLX_MODULES & set(GROUPS["cache"])
    assert {"omlx.engine.text.detokenize", "omlx.draft.accept"} <= set(GROUPS["declared"])


def test_probe_catches_a_module_that_needs_mlx() -> None:
    # The probe must fail on an MLX module, else the green result above means nothing.
    result = subprocess.run(
        [sys.executable, "-c", PROBE.format(blocked=BLOCKED), "omlx.cache.kv_blocks"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert "omlx.cache.kv_blocks" in report["failures"]


def test_unit_tests_collect_without_mlx() -> None:
    # tests/unit is pure Python. Collection imports every unit test module
    # and conftest; MLX tests belong under tests/mlx.
    code = (
        f"import sys\nfor name in {BLOCKED!r}:\n    sys.modules[name] = None\n"
        "import pytest\n"
        "sys.exit(pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider', 'tests/unit']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
