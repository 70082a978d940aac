"""MLX's compiled CUDA kernels are kept under OMLX_HOME unless the user chose a folder."""

from __future__ import annotations

import os
import subprocess
import sys

from omlx.platform.kernel_cache import PTX_CACHE_ENV, persist_kernel_cache


def test_the_cache_goes_under_the_home_unless_one_is_set(tmp_path, monkeypatch):
    monkeypatch.delenv(PTX_CACHE_ENV, raising=False)
    assert persist_kernel_cache(tmp_path) == tmp_path / "kernels" / "mlx-ptx"
    assert os.environ[PTX_CACHE_ENV] == str(tmp_path / "kernels" / "mlx-ptx")
    monkeypatch.setenv(PTX_CACHE_ENV, "/somewhere/mine")
    assert str(persist_kernel_cache(tmp_path)) == "/somewhere/mine"
    assert os.environ[PTX_CACHE_ENV] == "/somewhere/mine"


def _folder_main_sets(tmp_path, command: str, **env: str) -> str:
    code = (
        "import os, sys; import omlx.cli.main as m; "
        f"sys.argv = ['omlx', {command!r}]; "
        f"m.app = lambda: print(os.environ.get({PTX_CACHE_ENV!r}, '')); m.main()"
    )
    clean = {k: v for k, v in os.environ.items() if k != PTX_CACHE_ENV}
    run = subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, "OMLX_HOME": str(tmp_path), "OMLX_BLAS": "off", **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return run.stdout.strip()


def test_every_mlx_command_sets_it_before_anything_runs(tmp_path):
    assert _folder_main_sets(tmp_path, "serve") == str(tmp_path / "kernels" / "mlx-ptx")
    assert _folder_main_sets(tmp_path, "serve", **{PTX_CACHE_ENV: "/x"}) == "/x"
    assert _folder_main_sets(tmp_path, "launch") == ""  # it runs no MLX: agents inherit nothing
