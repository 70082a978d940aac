"""Where MLX's CUDA backend keeps the kernels it compiles at run time.

MLX compiles some CUDA kernels (NVRTC) the first time a process meets them, and keeps
the result in $TMPDIR/mlx/<version>/ptx unless MLX_PTX_CACHE_DIR names another folder. A
temporary folder is emptied by reboots and cleaners, and every kernel is then compiled
again on first use, in the middle of serving: on an H200 a serving run's batch lost
2.6 s in one step the first time it shrank to a new size (taken to be such compiles;
serving_scale_h200.md). omlx keeps them under its home instead, so they are compiled
once per machine and MLX version, unless the user named a folder. Elsewhere (CPU,
Metal) MLX never reads the variable.
"""

from __future__ import annotations

import os
from pathlib import Path

PTX_CACHE_ENV = "MLX_PTX_CACHE_DIR"


def persist_kernel_cache(home: Path) -> Path:
    """Point MLX's compiled-kernel cache at `home`/kernels/mlx-ptx unless one is set;
    the folder in use. Before MLX compiles anything (it reads the variable once)."""
    if not os.environ.get(PTX_CACHE_ENV):
        os.environ[PTX_CACHE_ENV] = str(home / "kernels" / "mlx-ptx")
    return Path(os.environ[PTX_CACHE_ENV])


__all__ = ["PTX_CACHE_ENV", "persist_kernel_cache"]
