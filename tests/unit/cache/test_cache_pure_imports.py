"""The pure-Python half of omlx.cache imports without MLX."""

from __future__ import annotations

import subprocess
import sys

PURE = [
    "omlx.cache.chain_hash",
    "omlx.cache.index",
    "omlx.cache.hot_tier",
    "omlx.cache.child_index",
    "omlx.cache.cold_format",
    "omlx.cache.cold_index",
    "omlx.cache.cold_store",
    "omlx.cache.prefix_cache",
    "omlx.cache.fingerprint",
    "omlx.cli.commands.cache",
]


def test_imports_without_mlx() -> None:
    code = (
        "import sys\n"
        "sys.modules['mlx'] = None\n"
        "sys.modules['mlx.core'] = None\n"
        "sys.modules['mlx_lm'] = None\n"
        + "".join(f"import {m}\n" for m in PURE)
        + "assert not any(k.startswith('mlx') and sys.modules[k] for k in sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
